"""Pure text renderings of profiles and metrics for the CLI (no torch import)."""

from __future__ import annotations

from eas.units import human, human_bytes, table


def profile_lines(arch, cost) -> list[str]:
    """Header figures plus the per-layer table of a cost profile."""
    c, h, w = cost.input_shape
    lines = [
        f"genome   {arch.encode()}",
        f"hash     {arch.canonical_hash()}",
        f"input    {c}x{h}x{w}, batch {cost.batch_size}",
        f"params   {cost.params:,} ({human(cost.params)})",
        f"MACs     {cost.macs:,} ({human(cost.macs)}; conv + linear + matmul multiply-adds)",
        f"FLOPs    {cost.flops:,} ({human(cost.flops)}; = 2 x MACs)",
        f"memory   inference {human_bytes(cost.memory_bytes_inference)}, "
        f"training {human_bytes(cost.memory_bytes_training)} (estimated: fp32 weights, "
        "AdamW state, activations)",
        "",
    ]
    rows = [[layer.name, layer.kind, "x".join(map(str, layer.output_shape)) or "-",
             f"{layer.params:,}", f"{layer.macs:,}"] for layer in cost.layers]
    rows.append(["total", "", "", f"{cost.params:,}", f"{cost.macs:,}"])
    lines.append(table(rows, ["layer", "type", "output", "params", "MACs"]))
    return lines


def energy_text(joules: float, source: str) -> str:
    """Every energy figure says where it came from."""
    return f"{joules:.3g} J ({source})"


def metrics_lines(m) -> list[str]:
    """The evaluation of one candidate, as the CLI prints it."""
    lines = [
        f"genome      {m.genome}",
        f"status      {m.status}" + (f" ({m.reason})" if m.reason else ""),
        f"accuracy    {m.accuracy:.2%} (validation, loss {m.val_loss:.3f})",
        f"params      {m.params:,}",
        f"MACs        {m.macs:,} ({human(m.macs)})",
        f"latency     {m.latency_ms:.2f} ms at batch 1 (p10 {m.latency_ms_p10:.2f}, p90 {m.latency_ms_p90:.2f}); "
        f"{m.latency_batch_ms:.2f} ms at batch {m.latency_batch}",
        f"training    {m.train_seconds:.1f} s, {m.train_steps} steps, {m.train_images:,} images, "
        f"{m.precision or '-'} on {m.device}",
        f"energy      training {energy_text(m.train_energy_j, m.energy_source)}; inference "
        f"{energy_text(m.inference_energy_j_per_1k, m.energy_source)} per 1000 samples",
    ]
    if m.energy_source == "estimated":
        lines.append("            estimated: no energy counter was readable"
                     + (f" ({m.energy_note})" if m.energy_note else ""))
    return lines
