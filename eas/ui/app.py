"""EAS Pareto explorer: `eas ui` serves this app (read-only, bound to 127.0.0.1 by default)."""

import streamlit as st

st.set_page_config(page_title="EAS explorer", layout="wide")
pages = [
    st.Page("app_pages/studies.py", title="Studies", default=True),
    st.Page("app_pages/pareto.py", title="Pareto"),
    st.Page("app_pages/progress.py", title="Progress"),
    st.Page("app_pages/trial.py", title="Trials"),
]
st.navigation(pages).run()
