import json
from pathlib import Path

import streamlit as st

from eas.arch.genome import Arch
from eas.deploy.arch_files import arch_document, standalone_source
from eas.errors import UserError
from eas.reports.explorer import markdown_text, rung_rows
from eas.reports.lineage import descendants, lineage_rows
from eas.reports.summary import is_inherited
from eas.ui.common import selected_study

loaded = selected_study()
if loaded is None:
    st.stop()
study, rows = loaded
st.title(f"Trials — {markdown_text(study.name)}")
by_number = {r.number: r for r in study.records}
complete = [r.number for r in study.records if r.state in ("complete", "infeasible", "stopped")]
suggested = next((by_number[row["trial"]] for row in rows if row["knee"]), None)
broken = [r for r in study.records if r.state == "broken"]
if broken:
    with st.expander(f"{len(broken)} malformed trial(s), left out of every view"):
        st.dataframe([{"trial": r.number, "problem": r.reason} for r in broken], hide_index=True, width="stretch")
default = [n for n in st.session_state.get("trial_choice", []) if n in complete] or (
    [suggested.number] if suggested else complete[:1])
chosen = st.multiselect("Trials (up to three, side by side)", complete, default=default, max_selections=3)
if not chosen:
    st.stop()


@st.cache_data(max_entries=64)
def layer_table(genome: str, shape: tuple, classes: int) -> list[dict]:
    from eas.arch.builder import build
    from eas.arch.profile import profile

    cost = profile(build(genome, shape, classes), shape)
    return [{"layer": layer.name, "type": layer.kind, "output": "x".join(map(str, layer.output_shape)),
             "params": layer.params, "MACs": layer.macs} for layer in cost.layers]


def number(value, spec: str) -> str:
    return format(value, spec) if isinstance(value, (int, float)) else "-"


task = study.task
for column, trial_number in zip(st.columns(len(chosen)), chosen, strict=True):
    record = by_number[trial_number]
    m = record.metrics
    with column:
        st.subheader(f"Trial {trial_number}" + (" (knee)" if suggested and trial_number == suggested.number else ""))
        st.code(record.genome, language=None, wrap_lines=True)
        st.caption(markdown_text(f"state: {record.state}" + (f" — {record.reason}" if record.reason else "")))
        st.dataframe([
            {"metric": "accuracy (validation" + (", weights inherited from the supernet)" if is_inherited(m) else ")"),
             "value": number(m.get("accuracy"), ".2%") + (
                f" [{m['accuracy_low']:.1%}, {m['accuracy_high']:.1%}]" if isinstance(m.get("accuracy_low"), float)
                else "")},
            {"metric": "MACs", "value": number(m.get("macs"), ",")},
            {"metric": "params", "value": number(m.get("params"), ",")},
            {"metric": "latency, batch 1", "value": number(m.get("latency_ms"), ".2f") + " ms"},
            {"metric": "inference energy", "value": f"{number(m.get('inference_energy_j_per_1k'), '.3g')} J/1k "
                                                     f"({m.get('energy_source')})"},
            {"metric": "training energy", "value": f"{number(m.get('train_energy_j'), '.3g')} J "
                                                    f"({m.get('energy_source')})"},
            {"metric": "device", "value": str(m.get("device"))},
            {"metric": "fidelity", "value": ", ".join(f"{k}={v}" for k, v in (m.get("fidelity") or {}).items()
                                                        if v is not None)},
        ], hide_index=True, width="stretch")
        lineage = lineage_rows(descendants(study.name, trial_number, Path.cwd()))
        if lineage:
            st.caption("Exported, trained and compressed from this trial (folders under the explorer's folder):")
            st.dataframe(lineage, hide_index=True, width="stretch")
        rungs = rung_rows(record)
        if rungs:
            st.caption("Rung by rung (accuracy with its 95% interval):")
            st.dataframe(rungs, hide_index=True, width="stretch")
        if task is None:
            st.info("This study does not record its input shape, so no layer table or download.")
            continue
        try:
            if record.state == "complete":
                document = arch_document(record, study.settings, study.name)
                st.download_button("arch.json", json.dumps(document, indent=2, default=str),
                                   f"trial{trial_number}-arch.json", "application/json", key=f"arch_{trial_number}")
                st.download_button("model.py", standalone_source(Arch.decode(record.genome), *task),
                                   f"trial{trial_number}-model.py", "text/x-python", key=f"model_{trial_number}")
            # A toggle, not an expander: Streamlit runs a collapsed expander's body, and building the
            # model imports torch (seconds on a page's first load).
            if st.toggle("layer table", key=f"layers_{trial_number}"):
                st.dataframe(layer_table(record.genome, *task), hide_index=True, width="stretch")
        except UserError as error:
            st.error(markdown_text(error))
