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
