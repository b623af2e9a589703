"""Plotly figures of the explorer, built from eas.reports.explorer rows (plotly: the `ui` extra)."""

from __future__ import annotations

import html

import plotly.graph_objects as go

from eas.objectives import OBJECTIVES

# How each kind of trial looks: the front stands out, dominated trials fade, infeasible and
# failed ones keep a distinct symbol so they are never mistaken for results.
ROLE_STYLE = {
    "knee": {"color": "#d62728", "symbol": "star", "symbol3d": "diamond", "size": 16, "opacity": 1.0},
    "pareto": {"color": "#1f77b4", "symbol": "circle", "symbol3d": "circle", "size": 10, "opacity": 1.0},
    # tied: dominated by nobody, but a cheaper model's accuracy lies within its 95% interval
    "tied": {"color": "#1f77b4", "symbol": "circle-open", "symbol3d": "circle-open", "size": 8, "opacity": 0.6},
    "dominated": {"color": "#9aa5b1", "symbol": "circle", "symbol3d": "circle", "size": 7, "opacity": 0.35},
    "infeasible": {"color": "#ff7f0e", "symbol": "x", "symbol3d": "x", "size": 7, "opacity": 0.5},
    "stopped": {"color": "#17becf", "symbol": "triangle-right", "symbol3d": "diamond-open", "size": 7,
                "opacity": 0.45},
    "pruned": {"color": "#8c564b", "symbol": "triangle-down", "symbol3d": "square-open", "size": 7, "opacity": 0.4},
    "failed": {"color": "#000000", "symbol": "x-thin-open", "symbol3d": "cross", "size": 7, "opacity": 0.4},
}
HOVER_FIELDS = ("trial", "accuracy", "accuracy_low", "accuracy_high", "rung", "macs", "params", "latency_ms",
                "inference_energy_j_per_1k", "energy_source", "genome")


def metric(name: str) -> str:
    """Objective name -> the row field that holds it."""
    return OBJECTIVES[name].metric if name in OBJECTIVES else name


def _hover(rows: list[dict]) -> list[str]:
    # Plotly renders a little HTML in hover text (links, bold): stored strings are escaped.
    return ["<br>".join(f"{k}: {row[k]:.4g}" if isinstance(row[k], float) else f"{k}: {html.escape(str(row[k]))}"
                        for k in HOVER_FIELDS) for row in rows]


def _error_bars(rows: list[dict]) -> dict:
    def gap(a, b):
        return max(0.0, a - b) if a == a and b == b else 0.0

    return {"type": "data", "symmetric": False, "thickness": 1, "width": 2,
            "array": [gap(r["accuracy_high"], r["accuracy"]) for r in rows],
            "arrayminus": [gap(r["accuracy"], r["accuracy_low"]) for r in rows]}


def pareto_figure(rows: list[dict], x: str, y: str, size: str | None = None, three_d: str | None = None) -> go.Figure:
    """Scatter of all trials on two objectives (or three, in 3-D), front lines up in order."""
    figure = go.Figure()
    for role, style in ROLE_STYLE.items():
        group = [r for r in rows if r["role"] == role and r[metric(x)] == r[metric(x)] and r[metric(y)] == r[metric(y)]]
        if not group:
            continue
        marker = {"color": style["color"], "symbol": style["symbol3d" if three_d else "symbol"],
                  "size": style["size"], "opacity": style["opacity"]}
        if size and role in ("pareto", "knee", "tied", "dominated"):
            values = [r[metric(size)] for r in group]
            top = max((v for v in values if v == v), default=1.0) or 1.0
            marker["size"] = [6 + 18 * (v / top if v == v else 0) for v in values]
        common = {"name": role, "mode": "markers", "marker": marker, "text": _hover(group), "hoverinfo": "text"}
        if three_d:
            figure.add_trace(go.Scatter3d(x=[r[metric(x)] for r in group], y=[r[metric(y)] for r in group],
                                          z=[r[metric(three_d)] for r in group], **common))
        else:
            # The 95% interval of each validation accuracy, so that differences inside it read as ties.
            bars = {axis: _error_bars(group) for axis, name in (("error_x", x), ("error_y", y)) if name == "accuracy"}
            figure.add_trace(go.Scatter(x=[r[metric(x)] for r in group], y=[r[metric(y)] for r in group],
                                        **bars, **common))
    # Accuracy is stored as a fraction and shown as a percentage, as every table shows it, in 3-D too.
    def axis(name: str) -> dict:
        return {"title": {"text": axis_title(name)}, **({"tickformat": ".0%"} if name == "accuracy" else {})}

    if three_d:
        figure.update_layout(scene={"xaxis": axis(x), "yaxis": axis(y), "zaxis": axis(three_d)})
    else:
        figure.update_layout(xaxis=axis(x), yaxis=axis(y))
    figure.update_layout(height=520, legend_title_text="trials", margin={"l": 10, "r": 10, "t": 30, "b": 10})
    return figure


def add_verified(figure: go.Figure, rows: list[dict], x: str, y: str) -> go.Figure:
    """Overlay `eas verify`'s retrained front and each baseline family (eas.reports.explorer.
    verified_rows) on a 2-D Pareto figure: lines in cost order, verified accuracies with their
    95% intervals, so the gain (or its absence) at equal cost shows at a glance."""
    groups: dict[str, list[dict]] = {}
    for row in rows:
        if row[metric(x)] == row[metric(x)] and row[metric(y)] == row[metric(y)]:
            groups.setdefault("retrained front" if row["role"] == "retrained" else row["family"], []).append(row)
    for index, (name, group) in enumerate(groups.items()):
        group.sort(key=lambda r: r[metric(x)])
        bars = {axis: _error_bars(group) for axis, objective in (("error_x", x), ("error_y", y))
                if objective == "accuracy"}
        retrained = name == "retrained front"
        figure.add_trace(go.Scatter(
            x=[r[metric(x)] for r in group], y=[r[metric(y)] for r in group], name=name, mode="lines+markers",
            line={"dash": "solid" if retrained else "dot", "color": "#2ca02c" if retrained else
                  FAMILY_COLOURS[index % len(FAMILY_COLOURS)]},
            marker={"symbol": "diamond" if retrained else "square", "size": 10}, **bars, hoverinfo="text",
            text=[f"{html.escape(r['label'])}<br>verified accuracy: {r['accuracy']:.4g}<br>{x}: {r[metric(x)]:.4g}"
                  f"<br>{y}: {r[metric(y)]:.4g}" for r in group]))
    return figure


FAMILY_COLOURS = ("#9467bd", "#e377c2", "#bcbd22", "#7f7f7f")


def parallel_figure(rows: list[dict], objectives: tuple[str, ...]) -> go.Figure:
    """The front on one axis per objective, each line coloured by the first objective. Accuracy
    in percent, as everywhere else; margins that leave the first axis' tick labels room."""
    front = [r for r in rows if r["pareto"]]

    def values(name: str) -> list[float]:
        return [100 * r[metric(name)] if name == "accuracy" else r[metric(name)] for r in front]

    dimensions = [{"label": axis_title(name), "values": values(name)} for name in objectives]
    figure = go.Figure(go.Parcoords(
        line={"color": values(objectives[0]), "colorscale": "Viridis", "showscale": True,
              "colorbar": {"title": {"text": axis_title(objectives[0])}}},
        dimensions=dimensions))
    figure.update_layout(margin={"l": 70, "r": 40, "t": 60, "b": 30}, height=420)
    return figure


AXIS_TITLES = {"accuracy": "accuracy (%)", "macs": "MACs", "params": "parameters",
               "energy": "inference energy (J/1k)", "latency": "latency (ms)", "memory": "inference memory (B)",
               "sram": "SRAM, int8 (B)", "flash": "flash, int8 (B)", "train_energy": "training energy (J)"}


def axis_title(objective: str) -> str:
    return AXIS_TITLES.get(objective, objective)


def history_figure(history: list[dict], x: str) -> go.Figure:
    """Hypervolume against trials (whole numbers), wall time (seconds) or energy spent (kWh, as the
    footprint beside it says)."""
    labels = {"trials": "trials finished", "seconds": "wall time (s)", "energy_j": "energy spent by the search (kWh)"}
    scale = 1 / 3.6e6 if x == "energy_j" else 1
    figure = go.Figure(go.Scatter(x=[h[x] * scale for h in history], y=[h["hypervolume"] for h in history],
                                  mode="lines+markers", line={"shape": "hv"}))
    figure.update_layout(xaxis_title=labels[x], yaxis_title="hypervolume (normalised)", height=320,
                         margin={"l": 10, "r": 10, "t": 30, "b": 10})
    if x == "trials":
        figure.update_xaxes(tickformat="d", rangemode="tozero", dtick=max(1, len(history) // 10) if history else 1)
    return figure
