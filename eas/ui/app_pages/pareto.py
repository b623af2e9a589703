import streamlit as st

from eas.reports.explorer import (
    FILTER_METRICS,
    FILTER_UNITS,
    filtered_front,
    front_of,
    markdown_text,
    objective_label,
    verified_rows,
)
from eas.reports.figures import add_verified, metric, parallel_figure, pareto_figure
from eas.reports.front import knee
from eas.reports.summary import (
    DEPLOY_HEADERS,
    accuracy_text,
    deploy_caption,
    deploy_rows,
    fidelity_text,
    memory_columns,
    native_resolution,
    pareto_headers,
    pareto_rows,
    predictor_lines,
    runtime_lines,
    scored_on,
)
from eas.ui.common import selected_study

loaded = selected_study()
if loaded is None:
    st.stop()
study, rows = loaded
objectives = study.objectives
st.title(f"Pareto front — {markdown_text(study.name)}")
st.caption(markdown_text(f"space {study.settings.get('space_name')}, data {study.settings.get('data')}; "
                         f"{len(rows)} trials. Objectives: " + ", ".join(objective_label(o) for o in objectives)))
broken = [r for r in rows if r["state"] == "broken"]
if broken:
    st.warning(f"{len(broken)} stored trial(s) are malformed and left out (see the Trials page).")

left, right = st.columns([1, 3])
with left:
    x = st.selectbox("x axis", objectives, index=min(1, len(objectives) - 1))
    y = st.selectbox("y axis", objectives, index=0)
    size = st.selectbox("marker size", ["(none)", *objectives])
    three_d = st.toggle("3-D view", value=False, disabled=len(objectives) < 3)
    z = st.selectbox("z axis", objectives, index=min(2, len(objectives) - 1)) if three_d else None
    latest = study.verification[-1] if study.verification else None
    overlay = latest is not None and not three_d and st.toggle(
        "retrained front and baselines (eas verify)", value=bool(latest.get("baselines")), key="verified_overlay")
    limits = {}
    ranges = {field: sorted(r[field] for r in rows if r["pareto"] and r[field] == r[field]) for field in FILTER_METRICS}
    ranges = {field: values for field, values in ranges.items() if len(values) >= 2 and values[0] != values[-1]}
    if ranges:  # with one or two trials there may be nothing to limit: no empty heading then
        st.subheader("Limits")
    for field, values in ranges.items():
        scale, shown = FILTER_UNITS[field]
        bottom, top = values[0] / scale, values[-1] / scale
        # Keyed by the study as well: each study's sliders start at its own largest value. The step
        # divides the range, so that its ends are on the slider (the default step of 0.01 left a
        # 0.133 J/1k maximum out of reach, and the slider started below it).
        chosen = st.slider(FILTER_METRICS[field], min_value=bottom, max_value=top, value=top,
                           step=(top - bottom) / 200, format=shown, key=f"limit_{field}_{study.name}")
        if chosen < top:
            limits[field] = chosen * scale
with right:
    figure = pareto_figure(rows, x, y, None if size == "(none)" else size, z)
    if overlay:
        figure = add_verified(figure, verified_rows(latest), x, y)
    st.plotly_chart(figure, width="stretch", key="pareto_chart")
    if overlay:
        st.caption(markdown_text("Retrained accuracies on " + scored_on(latest) + "; the trials' on validation."))

front = filtered_front(front_of(study.records, rows, objectives), limits)
suggested = knee(front, objectives)
if suggested is not None:
    m = suggested.metrics
    st.success(markdown_text(
        f"Suggested (knee point of the filtered front): trial {suggested.number} — accuracy "
        f"{accuracy_text(m)}, {m.get('macs', 0):,.0f} MACs, {m.get('params', 0):,.0f} params, "
        f"energy {m.get('inference_energy_j_per_1k') or 0:.3g} J/1k ({m.get('energy_source')})"))
    st.session_state["trial_choice"] = [suggested.number]
else:
    st.warning("No trial of the Pareto front is within these limits.")
st.subheader(f"Pareto set within the limits: {len(front)} trials")
supernet_line = [f"accuracy: {fidelity_text(study.settings)}"] if study.settings.get("supernet") else []
for line in [*supernet_line, *runtime_lines(front), *predictor_lines(study.settings, study.records)]:
    st.caption(markdown_text(line))
columns = memory_columns(objectives, study.settings.get("constraints"), study.settings)
st.dataframe([dict(zip(pareto_headers(columns), row, strict=True))
              for row in pareto_rows(front, suggested, columns, native_resolution(study.settings))],
             hide_index=True, width="stretch", key="front_table")
if latest is not None and latest.get("deploy"):  # eas verify --deploy: every verified member marked
    st.subheader("Deployable")
    st.caption(markdown_text(f"Verified members {deploy_caption(latest)} (eas verify --deploy)."))
    st.dataframe([dict(zip(DEPLOY_HEADERS, row, strict=True)) for row in deploy_rows(latest)],
                 hide_index=True, width="stretch", key="deploy_table")
if len(objectives) >= 3 and any(r["pareto"] for r in rows):
    st.subheader("Parallel coordinates of the front")
    st.plotly_chart(parallel_figure(rows, objectives), width="stretch", key="parallel_chart")
hidden = [o for o in objectives if metric(o) not in rows[0]] if rows else []
if hidden:
    st.caption(f"not stored for plotting: {', '.join(hidden)}")
