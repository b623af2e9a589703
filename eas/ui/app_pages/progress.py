import streamlit as st

from eas.reports.explorer import markdown_text
from eas.reports.figures import history_figure
from eas.reports.front import footprint, rank_agreement, rung_counts, time_split_total
from eas.reports.summary import baseline_lines, scored_on, smaller_rungs_text, split_text
from eas.reports.time_to_beat import runtime_words, time_to_beat, time_to_beat_lines
from eas.ui.common import cached_history, selected_study
from eas.units import format_duration

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

def tau_text(tau) -> str:
    return f"{tau:+.2f}" if isinstance(tau, (int, float)) else "not measured yet (fewer than 3 promoted trials)"


st.subheader("What the search cost")
spent = footprint(study.records, study.objectives, study.reference)
columns = st.columns(4)
columns[0].metric("wall time", format_duration(spent["wall_seconds"]))
columns[1].metric("evaluating candidates", format_duration(spent["evaluate_seconds"]))
columns[2].metric(f"energy ({spent['energy_source']})", f"{spent['energy_kwh']:.3g} kWh")
columns[3].metric("hypervolume per kWh", f"{spent['hypervolume_per_kwh']:,.1f}" if spent["hypervolume_per_kwh"]
                  else "-")
split = time_split_total(study.records)
if split:
    st.caption("Where the evaluation time went: " + markdown_text(split_text(split)))
if study.settings.get("multi_fidelity"):
    st.subheader("Rungs: how far candidates trained, and how well each rung ranks them")
    agreement = {a["from_rung"]: a for a in rank_agreement(study.records)}
    st.dataframe([{"rung": c["rung"], "steps": c["steps"], "finished": c["finished"], "trained on": c["trained_on"],
                   "Kendall tau with the next rung": tau_text(agreement.get(c["rung"], {}).get("kendall_tau")),
                   "over promoted trials": agreement.get(c["rung"], {}).get("trials")}
                  for c in rung_counts(study.records)], hide_index=True, width="stretch", key="rung_table")
    smaller = smaller_rungs_text(study.settings["multi_fidelity"])
    if smaller:
        st.caption(f"Trained and ranked {smaller} (`--rung-resolution`); the top rung at full size.")
if study.baselines:  # eas search --baselines: how long the search took to beat each one
    st.subheader("Time to beat the hand-designed networks")
    beatings = time_to_beat(study.records, study.baselines)
    st.code("\n".join(time_to_beat_lines(beatings, runtime_words(study.settings))), language=None)
if study.verification:
    latest = study.verification[-1]
    st.subheader("Verification of the front (`eas verify`)")
    tau = latest.get("kendall_tau")
    st.caption(markdown_text(f"{latest.get('held')} of {latest.get('of')} members held their place; Kendall tau "
                             f"search vs verified {tau:+.2f}" if tau is not None else
                             f"{latest.get('held')} of {latest.get('of')} members held their place"))
    st.caption(markdown_text("Verified accuracies on " + scored_on(latest) + "; the search's on its validation "
                             "images."))
    st.dataframe([{k: m.get(k) for k in ("trial", "search_accuracy", "verified_accuracy", "seed_spread",
                                         "held_place")} for m in latest.get("members", []) if isinstance(m, dict)],
                 hide_index=True, width="stretch", key="verification_table")
    if latest.get("baselines"):
        st.subheader("The front against the hand-designed baselines")
        st.code("\n".join(baseline_lines(latest["baselines"], latest["comparison"])), language=None)
