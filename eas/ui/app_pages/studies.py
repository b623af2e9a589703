import time

import streamlit as st

from eas.errors import UserError
from eas.reports.explorer import markdown_text
from eas.reports.summary import study_rows
from eas.ui.common import cached_studies, storage

st.title("Studies")
try:
    rows = cached_studies(storage())
except UserError as error:
    st.error(markdown_text(error))
    st.stop()
for row in rows:
    if row["error"]:
        st.error(markdown_text(f"{row['storage']}: {row['error']}"))
studies = [r for r in rows if r["study"]]
if not studies:
    st.info("No EAS studies found. Run `eas search --space tiny --data digits --budget 1m` first.")
    st.stop()
columns = ["study", "space", "data", "state", "budget", "trials", "complete", "stopped", "infeasible", "failed",
           "objectives", "started", "storage"]
st.dataframe([{k: r[k] for k in columns} for r in study_rows(studies, time.time())], hide_index=True,
             width="stretch")
labels = [f"{r['study']}  ({r['storage']})" for r in studies]
current = st.session_state.get("study")
index = next((i for i, r in enumerate(studies) if (r["url"], r["study"]) == current), 0)
picked = st.selectbox("Open study", range(len(studies)), index=index, format_func=labels.__getitem__)
st.session_state["study"] = (studies[picked]["url"], studies[picked]["study"])
st.caption("Go to **Pareto** to see its trade-offs. The explorer only reads: it never changes a study.")
