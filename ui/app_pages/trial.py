import json

import streamlit as st
from common import selected_study

from eas.export import arch_document, standalone_source
from eas.genome import Arch
from eas.report import knee, pareto_front

loaded = selected_study()
if loaded is None:
    st.stop()
study, rows = loaded
st.title(f"Trials — {study.name}")
by_number = {r.number: r for r in study.records}
complete = [r.number for r in study.records if r.state in ("complete", "infeasible")]
suggested = knee(pareto_front(study.records, study.objectives), study.objectives)
default = [n for n in st.session_state.get("trial_choice", []) if n in by_number] or (
    [suggested.number] if suggested else complete[:1])
chosen = st.multiselect("Trials (up to three, side by side)", complete, default=default, max_selections=3)
if not chosen:
    st.stop()


@st.cache_data(max_entries=64)
def layer_table(genome: str, shape: tuple, classes: int) -> list[dict]:
    from eas.builder import build
    from eas.cost import profile

    cost = profile(build(genome, shape, classes), shape)
    return [{"layer": layer.name, "type": layer.kind, "output": "x".join(map(str, layer.output_shape)),
             "params": layer.params, "MACs": layer.macs} for layer in cost.layers]


shape, classes = tuple(study.settings["input_shape"]), int(study.settings["num_classes"])
for column, number in zip(st.columns(len(chosen)), chosen, strict=True):
    record = by_number[number]
    m = record.metrics
    with column:
        st.subheader(f"Trial {number}" + (" (knee)" if suggested and number == suggested.number else ""))
        st.code(record.genome, language=None, wrap_lines=True)
        st.caption(f"state: {record.state}" + (f" — {record.reason}" if record.reason else ""))
        st.dataframe([
            {"metric": "accuracy (validation)", "value": f"{m.get('accuracy', 0):.2%}"},
            {"metric": "MACs", "value": f"{m.get('macs', 0):,}"},
            {"metric": "params", "value": f"{m.get('params', 0):,}"},
            {"metric": "latency, batch 1", "value": f"{m.get('latency_ms') or 0:.2f} ms"},
            {"metric": "inference energy", "value": f"{m.get('inference_energy_j_per_1k') or 0:.3g} J/1k "
                                                     f"({m.get('energy_source')})"},
            {"metric": "training energy", "value": f"{m.get('train_energy_j') or 0:.3g} J ({m.get('energy_source')})"},
            {"metric": "device", "value": str(m.get("device"))},
            {"metric": "fidelity", "value": ", ".join(f"{k}={v}" for k, v in (m.get("fidelity") or {}).items()
                                                        if v is not None)},
        ], hide_index=True, width="stretch")
        if record.state == "complete":
            document = arch_document(record, study.settings, study.name)
            st.download_button("arch.json", json.dumps(document, indent=2, default=str), f"trial{number}-arch.json",
                               "application/json", key=f"arch_{number}")
            st.download_button("model.py", standalone_source(Arch.decode(record.genome), shape, classes),
                               f"trial{number}-model.py", "text/x-python", key=f"model_{number}")
        with st.expander("layer table"):
            st.dataframe(layer_table(record.genome, shape, classes), hide_index=True, width="stretch")
