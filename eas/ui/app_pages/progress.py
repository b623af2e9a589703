import streamlit as st

from eas.explorer import markdown_text
from eas.figures import history_figure
from eas.ui.common import cached_history, selected_study

loaded = selected_study()
if loaded is None:
    st.stop()
study, rows = loaded
st.title(f"Search progress — {markdown_text(study.name)}")
history = cached_history(study.url, study.name)
if not history:
    st.info("No finished trial yet.")
    st.stop()
reference = ", ".join(f"{k} {v:,.4g}" for k, v in study.reference.items())
st.caption(markdown_text("Hypervolume of the feasible trials, normalised to [0, 1]: each objective is minimised "
           "(1 - accuracy, cost / reference) against the fixed reference point (1, …, 1). Cost references "
           f"(the space's largest architecture x 1.1, or a constraint's limit): {reference}."))
st.metric("hypervolume now", f"{history[-1]['hypervolume']:.4f}", help="after the last finished trial")
for axis, title in (("trials", "against trials"), ("seconds", "against wall time"),
                    ("energy_j", "against energy spent by the search")):
    st.subheader(f"Hypervolume {title}")
    st.plotly_chart(history_figure(history, axis), width="stretch", key=f"history_{axis}")
