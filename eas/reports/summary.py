"""Pure text renderings of profiles and metrics for the CLI (no torch import)."""

from __future__ import annotations

from eas.arch.genome import Arch
from eas.reports.front import (
    accuracy_interval,
    footprint,
    hypervolume,
    knee,
    pareto_front,
    rank_agreement,
    rung_counts,
    time_split_total,
    unapproached_limits,
)
from eas.study.queue import budget_text
from eas.study.records import counts
from eas.units import format_duration, human, human_bytes, printable, table


def profile_lines(arch, cost, sram_bytes: int, flash_bytes: int) -> list[str]:
    """Header figures plus the per-layer table of a cost profile."""
    c, h, w = cost.input_shape
    lines = [
        f"genome   {arch.encode()}",
        f"hash     {arch.canonical_hash()}",
        f"input    {c}x{h}x{w}, batch {cost.batch_size}"
        + (f"; resized by the network to {c}x{arch.stem.resolution}x{arch.stem.resolution} first"
           if arch.stem.resolution else ""),
        f"params   {cost.params:,} ({human(cost.params)})",
        f"MACs     {cost.macs:,} ({human(cost.macs)}; conv + linear + matmul multiply-adds)",
        f"FLOPs    {cost.flops:,} ({human(cost.flops)}; = 2 x MACs)",
        f"memory   inference {human_bytes(cost.memory_bytes_inference)}, "
        f"training {human_bytes(cost.memory_bytes_training)} (estimated: fp32 weights, "
        "AdamW state, activations)",
        f"int8     SRAM {human_bytes(sram_bytes)} ({sram_bytes:,} B), flash {human_bytes(flash_bytes)} "
        f"({flash_bytes:,} B) (counted: a microcontroller's activation arena and model file)",
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
        f"            in {runtime_text(m.latency_runtime)}" if not m.runtime_error else
        printable(f"            not measured: the runtime could not take the model ({m.runtime_error})"),
        f"training    {m.train_seconds:.1f} s, {m.train_steps} steps, {m.train_images:,} images, "
        f"{m.precision or '-'} on {m.device}",
        f"energy      training {energy_text(m.train_energy_j, m.energy_source)}; inference "
        f"{energy_text(m.inference_energy_j_per_1k, m.energy_source)} per 1000 samples",
    ]
    if m.energy_source == "estimated":
        lines.append("            estimated: no energy counter was readable"
                     + (f" ({m.energy_note})" if m.energy_note else ""))
    return lines


# Sizes shown beside the fixed columns when a study optimises or limits them.
MEMORY_COLUMNS = {"memory": ("memory", "memory_bytes_inference"), "sram": ("SRAM int8", "sram_bytes"),
                  "flash": ("flash int8", "flash_bytes")}


def memory_columns(objectives, constraints: dict | None = None, settings: dict | None = None) -> list[str]:
    """The optional columns a study's Pareto table shows: the memory objectives it optimises or
    limits, and "input" (each network's input resolution) where its space chooses one."""
    limited = {str(name).removeprefix("max_") for name in constraints} if isinstance(constraints, dict) else set()
    space = (settings or {}).get("space")
    resolution = ["input"] if isinstance(space, dict) and space.get("resolution") is not None else []
    return resolution + [name for name in MEMORY_COLUMNS if name in objectives or name in limited]


def pareto_headers(columns: list[str]) -> list[str]:
    return ["trial", "accuracy (95% CI)", "MACs", "params",
            *(MEMORY_COLUMNS[c][0] if c in MEMORY_COLUMNS else c for c in columns), "energy", "latency", "genome"]


def _input_text(genome: str | None, native: int | None) -> str:
    """A network's input resolution: the stem's `i` (it resizes), else the data's own."""
    size = (Arch.decode(genome).stem.resolution if genome else 0) or native
    return f"{size} px" if size else "as given"


def pareto_rows(front, knee_record, columns: list[str] = (), native: int | None = None) -> list[list]:
    """Rows of the Pareto table (`pareto_headers(columns)`): the knee point is marked with '*'.
    `native`: the data's resolution, shown for networks that do not resize their input."""
    rows = []
    for r in front:
        m = r.metrics
        energy = m.get("inference_energy_j_per_1k")
        cells = [_input_text(r.genome, native) if c == "input" else
                 human_bytes(v) if isinstance(v := m.get(MEMORY_COLUMNS[c][1]), (int, float)) else "-"
                 for c in columns]
        rows.append([
            f"{r.number}{'*' if knee_record is not None and r.number == knee_record.number else ''}",
            accuracy_text(m), human(m.get("macs", 0)), human(m.get("params", 0)), *cells,
            f"{energy:.3g} J/1k ({m.get('energy_source', '?')})" if energy is not None else "-",
            f"{m.get('latency_ms', 0):.2f} ms", r.genome or "",
        ])
    return rows


def native_resolution(settings: dict) -> int | None:
    """The data's own resolution as a study stored it (the smaller side), or None."""
    shape = settings.get("input_shape")
    return min(shape[1:]) if isinstance(shape, list) and len(shape) == 3 else None


def accuracy_text(metrics: dict) -> str:
    """85.20% +-0.90: the validation accuracy with the half-width of its 95% interval."""
    accuracy = metrics.get("accuracy") or 0.0
    low, high = accuracy_interval(metrics)
    half = (high - low) / 2 if high == high else 0.0
    text = f"{accuracy:.2%} ±{half:.2%}" if half else f"{accuracy:.2%}"
    return text + " inherited" if is_inherited(metrics) else text


def is_inherited(metrics: dict) -> bool:
    """An accuracy of weights inherited from a supernet, not of training (eas.nas.one_shot)."""
    fidelity = metrics.get("fidelity")
    return isinstance(fidelity, dict) and fidelity.get("kind") == "inherited"


def trust_text(trust: dict | None) -> str:
    """How well a supernet's inherited accuracies rank like stand-alone training."""
    if not isinstance(trust, dict) or not isinstance(trust.get("kendall_tau"), (int, float)):
        return "trust not measured (`eas supernet trust DIR`)"
    fidelity = trust.get("fidelity") or {}
    return (f"Kendall tau {trust['kendall_tau']:+.2f} between inherited and stand-alone accuracy over "
            f"{trust.get('n')} random sub-networks (each trained alone {fidelity.get('epochs')} epoch(s) of "
            f"{fidelity.get('subset') or 'all'} images)")


def fidelity_text(settings: dict) -> str:
    supernet = settings.get("supernet") or {}
    if supernet:
        return printable(f"inherited from supernet {supernet.get('path')} (hash {str(supernet.get('hash'))[:12]}); "
                         + trust_text(supernet.get("trust")) + "; `eas verify` retrains the front")
    fidelity = settings.get("fidelity", {})
    return (f"{fidelity.get('epochs')} epoch(s), subset {fidelity.get('subset') or 'all'}, "
            f"batch {fidelity.get('batch_size')}")


def supernet_lines(folder: str, description: dict, trust: dict | None) -> list[str]:
    """What `eas supernet show` prints."""
    trained, recipe = description.get("trained") or {}, description.get("recipe") or {}
    c, h, w = description.get("input_shape") or (0, 0, 0)
    energy = energy_text(trained.get("energy_j") or 0.0, trained.get("energy_source", "?"))
    return [printable(line) for line in (
        f"supernet    {folder} (hash {str(description.get('hash'))[:12]})",
        f"space       {description.get('space_name')}, data {description.get('data')}, input {c}x{h}x{w}, "
        f"{description.get('num_classes')} classes, {description.get('parameters', 0):,} shared parameters",
        f"trained     {trained.get('steps')} steps ({trained.get('images', 0):,} images) in "
        f"{format_duration(trained.get('seconds') or 0)}, {energy} "
        f"on {trained.get('device')} ({trained.get('precision')})",
        f"recipe      {recipe.get('sandwich')}; {recipe.get('distillation')}; {recipe.get('channel_order')}",
        f"trust       {trust_text(trust)}",
    )] + ([f"            goal tau >= 0.6: {'met' if trust['kendall_tau'] >= 0.6 else 'NOT met'}"]
          if isinstance(trust, dict) and isinstance(trust.get("kendall_tau"), (int, float)) else [])


def split_text(split: dict[str, float]) -> str:
    total = sum(split.values())
    if not total:
        return "-"
    return ", ".join(f"{phase} {seconds / total:.0%}" for phase, seconds in
                     sorted(split.items(), key=lambda item: -item[1]) if seconds / total >= 0.005)


def smaller_rungs_text(ladder: dict) -> str | None:
    """What a ladder that trains its lower rungs on smaller images says of it (None: full size)."""
    scale = ladder.get("resolution")
    return f"below the top at {scale:g}x the input size" if isinstance(scale, float) and scale < 1 else None


def bands_text(ladder: dict) -> str | None:
    """What a ladder that ranks within cost bands says of it (None: among all results)."""
    bands = ladder.get("bands")
    return f"ranked within {bands} bands of MACs" if isinstance(bands, int) and bands > 1 else None


def fidelity_lines(settings: dict, records) -> list[str]:
    """The rungs of a multi-fidelity study, how many reached each, and how well each ranks."""
    ladder = settings.get("multi_fidelity") or {}
    if not ladder:
        return []
    counts = {c["rung"]: c for c in rung_counts(records)}
    agreement = {a["from_rung"]: a for a in rank_agreement(records)}
    notes = [text for text in (smaller_rungs_text(ladder), bands_text(ladder)) if text]
    lines = [f"rungs       {len(ladder['steps'])} (eta {ladder['eta']}{''.join('; ' + n for n in notes)}): "
             + ", ".join(f"rung {k} at {steps} steps: {counts.get(k, {}).get('finished', 0)} finished"
                         for k, steps in enumerate(ladder["steps"]))]
    for k in range(len(ladder["steps"]) - 1):
        entry = agreement.get(k)
        tau = entry["kendall_tau"] if entry else None
        lines.append(f"            rung {k} -> {k + 1}: Kendall tau "
                     + (f"{tau:+.2f} over {entry['trials']} promoted trials" if tau is not None
                        else "not yet measured (fewer than 3 promoted trials)"))
    return lines


def footprint_lines(spent: dict, records) -> list[str]:
    """`spent`: eas.reports.front.footprint of the records."""
    per_kwh = spent["hypervolume_per_kwh"]
    return [f"footprint   {format_duration(spent['wall_seconds'])} wall, evaluations "
            f"{format_duration(spent['evaluate_seconds'])}, {spent['energy_kwh']:.3g} kWh ({spent['energy_source']})"
            + (f"; hypervolume per kWh {per_kwh:,.1f}" if per_kwh else ""),
            f"time split  {split_text(time_split_total(records))}"]


def study_lines(name: str, settings: dict, records, objectives, reference) -> list[str]:
    """What `eas show STUDY` prints: the study, its counts, hypervolume and Pareto set."""
    c = counts(records)
    spent = footprint(records, objectives, reference)  # with the hypervolume, computed once
    front = pareto_front(records, objectives)
    knee_record = knee(front, objectives)
    columns = memory_columns(objectives, settings.get("constraints"), settings)
    lines = [
        printable(f"study       {name}: space {settings.get('space_name')}, data {settings.get('data')}, "
                  f"sampler {settings.get('sampler')}"),
        f"objectives  {', '.join(objectives)}"
        + (f"; constraints {settings['constraints']}" if settings.get("constraints") else ""),
        f"fidelity    {fidelity_text(settings)}",
        "trials      " + ", ".join(f"{v} {k}" for k, v in c.items() if v),
        *fidelity_lines(settings, records),
        f"hypervolume {spent['hypervolume']:.4f} (normalised; reference point: "
        "accuracy 0 and the space's largest arch x 1.1, or the constraint limit)",
        *footprint_lines(spent, records),
        "",
        f"Pareto set ({len(front)} trials; * = knee point, the balanced trade-off; accuracies whose 95% "
        "intervals overlap count as ties):",
        table(pareto_rows(front, knee_record, columns, native_resolution(settings)), pareto_headers(columns)) if front
        else "  (no complete feasible trial yet)",
    ]
    lines.extend(limit_lines(unapproached_limits(records, objectives, settings.get("constraints"))))
    sources = {r.metrics.get("energy_source") for r in front}
    if "estimated" in sources:
        lines.append("energy: estimated from CPU time x watts per core (no energy counter was readable)")
    lines.extend(runtime_lines(front))
    lines.extend(predictor_lines(settings, records))
    return lines


def limit_lines(unapproached: list[dict]) -> list[str]:
    """One line per limit the Pareto set never came near (eas.reports.front.unapproached_limits)."""
    def shown(metric: str, value: float) -> str:
        return f"{value:.3g} ms" if metric == "latency_ms" else human_bytes(value) if metric.endswith("bytes") \
            or metric.endswith("_inference") else human(value)

    return [f"limit       {u['limit']} {shown(u['metric'], u['value'])} never approached: the Pareto set's costliest "
            f"member uses {shown(u['metric'], u['front_max'])} ({u['front_max'] / u['value']:.0%}), the costliest "
            f"complete trial {shown(u['metric'], u['trials_max'])}; the front's accurate end is not where the limit "
            "stands (the search's fidelity favours networks that learn fast: docs/benchmarks.md)"
            for u in unapproached]


def runtime_text(provenance: dict) -> str:
    """Where one latency and inference energy came from, in words (CLI and explorer alike)."""
    if not isinstance(provenance, dict) or not provenance:
        return "eager PyTorch (measured before runtimes were recorded)"
    threads = provenance.get("threads")
    batches = " and ".join(map(str, provenance.get("batch") or []))
    return printable(f"{provenance.get('runtime')} ({provenance.get('provider')}), {threads} thread"
                     f"{'s' if threads != 1 else ''}, batch {batches}, on {provenance.get('device')}")


def runtime_lines(records) -> list[str]:
    """One line per distinct runtime that measured these records' latencies and energies."""
    texts = sorted({runtime_text(r.metrics.get("latency_runtime")) for r in records})
    return [f"latency and inference energy measured in {text}" for text in texts]


def _positive(value) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0 else None


def predictor_lines(settings: dict, records) -> list[str]:
    """How far to trust the latencies of a study that refused proposals by a predicted latency:
    its error on the calibration's held-out networks, and on this study's own candidates that
    were measured at the top rung (nn-Meter's measure: the share within +-10%)."""
    predictor = (settings.get("runtime") or {}).get("predictor")
    if not isinstance(predictor, dict):
        return []
    lines = [printable(f"latency     predicted by a {predictor.get('kind')} predictor ({predictor.get('space')} "
                       f"space) before training; measured for candidates that reach the top rung")]
    error = predictor.get("error") if isinstance(predictor.get("error"), dict) else {}
    n, within, median = (error.get(k) for k in ("n", "within", "median_abs"))
    if _positive(n) and isinstance(within, (int, float)) and _positive(median):
        lines.append(f"            calibration: {within:.0%} of {n} held-out networks within +-10% "
                     f"(median error {median:.1%})")
    pairs = [(_positive(r.metrics.get("latency_predicted_ms")), _positive(r.metrics.get("latency_ms")))
             for r in records if r.metrics.get("latency_source") == "measured"]
    errors = [abs(p / m - 1) for p, m in pairs if p and m]
    if errors:
        share = sum(e <= 0.10 for e in errors) / len(errors)
        lines.append(f"            this study: {share:.0%} of {len(errors)} top-rung measurements within +-10% of "
                     f"the prediction (median error {sorted(errors)[len(errors) // 2]:.1%})")
    return lines


def run_lines(summary, budget, records, objectives, reference) -> list[str]:
    """The end-of-run summary: how the budget was spent."""
    c = counts(records)
    wall = summary.wall_seconds
    spent = summary.evaluate_seconds
    share = spent / wall if wall else 0.0
    limit = f"budget {format_duration(budget.seconds)}" if budget.seconds else f"{budget.trials} trials"
    refused = sum(summary.refused.values())
    return [
        f"stopped     {summary.stopped} ({limit}; ran {format_duration(wall)})",
        f"this run    {summary.trials} trials, {summary.cached} reused from identical genomes; "
        f"evaluating candidates {format_duration(spent)} ({share:.0%} of the time)",
        f"            time per phase: {split_text(summary.time_split)}",
        f"proposals   {refused} refused before becoming trials"
        + (f" ({', '.join(f'{n} {reason}' for reason, n in summary.refused.items())})" if refused else ""),
        "study       " + ", ".join(f"{v} {k}" for k, v in c.items() if v)
        + f"; Pareto set {len(pareto_front(records, objectives))}, "
          f"hypervolume {hypervolume(records, objectives, reference):.4f}",
    ]


def verification_lines(result: dict) -> list[str]:
    """What `eas verify` found: rank agreement, seed spread, who held their place, and the front
    against the hand-designed baselines trained beside it."""
    tau = result.get("kendall_tau")
    images = f" on {result['train_images']:,} training images" if isinstance(result.get("train_images"), int) else ""
    lines = [f"verified    {result['of']} Pareto members at {result['steps']} steps ({result['factor']:.3g}x the "
             f"full fidelity){images}, {result['seeds']} other seed(s), in {format_duration(result['seconds'])}",
             "scored on   " + scored_on(result)]
    if isinstance(result.get("selection"), str):
        lines.append("chosen      " + printable(result["selection"]))
    lines += ["rank        Kendall tau search vs verified: " + (f"{tau:+.2f}" if tau is not None else "n/a (< 3)"),
              f"held        {result['held']} of {result['of']} members kept their place on the Pareto set"]
    costs = result["members"][0].get("costs") if result["members"] else None
    if isinstance(costs, dict) and isinstance(costs.get("latency_runtime"), dict):
        lines.append(f"timed       all together after training, in {runtime_text(costs['latency_runtime'])}; "
                     f"energy {printable(costs.get('energy_source') or 'unknown')}")
    if isinstance(result.get("recipe"), dict):
        lines.append("recipe      " + recipe_text(result["recipe"]))
    rows = [[str(r["trial"]), f"{r['search_accuracy']:.2%}", f"{r['verified_accuracy']:.2%}",
             f"{r['verified_accuracy'] - r['search_accuracy']:+.2%}",
             f"{r['seed_spread']:.2%}" if r.get("seed_spread") is not None else "-",
             "yes" if r["held_place"] else "no", *_cost_cells(r), r["genome"]] for r in result["members"]]
    verified = "verified (test)" if result.get("split") == "test" else "verified (val)"
    lines += ["", table(rows, ["trial", "search (val)", verified, "change", "seed spread", "held", "MACs", "params",
                               "latency ms", "genome"])]
    if result.get("deploy"):
        lines += ["", *deploy_lines(result)]
    if result.get("baselines"):
        lines += ["", *baseline_lines(result["baselines"], result["comparison"])]
    return lines


def scored_on(result: dict) -> str:
    """Which images a verification's accuracies come from."""
    split = result.get("test_split") if isinstance(result.get("test_split"), dict) else {}
    if result.get("split") != "test":
        return ("validation images, the split the search ranked on (a verification from before EAS scored on the "
                "test split: optimistic; run eas verify again)")
    images = split.get("images")
    count = f"{images:,} " if isinstance(images, int) else ""
    source = "the official test split" if split.get("source") == "official" else "the held-out test split"
    return f"{count}images of {source}, which neither the search nor this selection saw"


DEPLOY_HEADERS = ["trial", "deployable", "float top-1", "max diff", "ms", "size",
                  "int8 top-1", "max diff ", "ms ", "size "]  # spaces: the UI's table needs distinct names


def deploy_rows(result: dict) -> list[list[str]]:
    """Each verified member in the deployment format: deployable or not (with the reason), its
    agreement with PyTorch, latency and size there, float and int8."""
    def figures(checked) -> list[str]:
        if not isinstance(checked, dict):
            return ["-", "-", "-", "-"]
        if "failed" in checked:
            return [printable(str(checked["failed"]))[:60], "-", "-", "-"]
        try:
            return [f"{checked['top1_agreement']:.1%}", f"{checked['max_abs_diff']:.2g}",
                    f"{checked['latency_ms']:.3g}", human_bytes(checked["bytes"])]
        except (KeyError, TypeError, ValueError):  # a shared study is input too: show what is readable
            return ["unreadable", "-", "-", "-"]

    rows = []
    for member in result.get("members") or []:
        checked = member.get("deploy") if isinstance(member.get("deploy"), dict) else {}
        verdict = "yes" if checked.get("deployable") is True else \
            "no: " + printable(str(checked.get("reason") or "not checked"))[:80]
        rows.append([str(member.get("trial")), verdict, *figures(checked.get("float")), *figures(checked.get("int8"))])
    return rows


def deploy_caption(result: dict) -> str:
    threads = next((m["deploy"].get("threads") for m in result.get("members") or []
                    if isinstance(m.get("deploy"), dict)), None)
    where = f" at {threads} thread(s), one image at a time" if isinstance(threads, int) else ""
    return (f"in {printable(str(result.get('deploy')))}, run in its own runtime{where} on the verifying "
            "machine's CPU (measured), compared with PyTorch on validation images")


def deploy_lines(result: dict) -> list[str]:
    return ["deployable  " + deploy_caption(result),
            table(deploy_rows(result), [h.strip() for h in DEPLOY_HEADERS])]


def recipe_text(recipe: dict) -> str:
    ema = recipe.get("ema") or 0
    return (f"augment {recipe.get('augment')}, label smoothing {recipe.get('label_smoothing') or 0:g}, "
            f"EMA {'off' if not ema else f'{ema:g}'}")


def _cost_cells(row: dict) -> list[str]:
    costs = row.get("costs") if isinstance(row.get("costs"), dict) else {}

    def cell(key: str, shown) -> str:
        value = costs.get(key)
        return shown(value) if isinstance(value, (int, float)) and value == value else "-"

    return [cell("macs", human), cell("params", human), cell("latency_ms", lambda v: f"{v:.3g}")]


def _points(value) -> str:
    return f"{value * 100:+.1f} points" if value is not None else "n/a"


def baseline_lines(baselines: list[dict], comparison: dict) -> list[str]:
    """The baselines as verified, and the front against them at equal cost and equal accuracy."""
    rows = [[b["name"], f"{b['verified_accuracy']:.2%}",
             f"{b['verified_interval'][0]:.1%}-{b['verified_interval'][1]:.1%}",
             f"{b['seed_spread']:.2%}" if b.get("seed_spread") is not None else "-", *_cost_cells(b)]
            for b in baselines]
    lines = [table(rows, ["baseline", "verified", "95% interval", "seed spread", "MACs", "params", "latency ms"]), ""]
    summary, volumes = comparison["summary"], comparison["hypervolume"]
    families = ", ".join(f"{name} {value:.4f}" for name, value in volumes["families"].items())
    ratio = summary.get("hypervolume_ratio")
    lines.append(f"hypervolume front {volumes['front']:.4f}, {families}: "
                 + (f"{ratio:.2f}x the better family" if ratio is not None else "no family inside the reference point"))
    union = summary.get("hypervolume_ratio_union")
    if union is not None:
        lines.append(f"            {union:.2f}x that of all the baselines together")
    coverage, best = summary.get("coverage"), summary.get("best_gain")
    if coverage is not None and best is not None:
        lines.append(f"coverage    {coverage:.0%} of the baselines matched within the noise at no more latency by "
                     f"a member; the best member {_points(best)} against the best baseline")
    for name in ("macs", "latency"):
        label = "MACs" if name == "macs" else "latency"
        cost_ratio = summary.get(f"{name}_ratio_at_accuracy")
        lines.append(f"at equal {label}: median accuracy gain {_points(summary.get(f'gain_at_{name}'))}; at equal "
                     f"accuracy the front needs " + (f"{cost_ratio:.2f}x the {label} (median)" if cost_ratio is not None
                                                      else "n/a (no member reaches a baseline's accuracy)"))
    rows = []
    for member in comparison["members"]:
        cells = [str(member["trial"])]
        for at in ("at_macs", "at_latency"):
            gain = member.get(at)
            cells += [gain["baseline"], f"{gain['gain'] * 100:+.1f} [{gain['interval'][0] * 100:+.1f}, "
                      f"{gain['interval'][1] * 100:+.1f}]"] if gain else ["none costs as little", "-"]
        rows.append(cells)
    lines += ["", table(rows, ["trial", "best baseline <= its MACs", "gain (points, 95%)",
                               "best baseline <= its latency", "gain (points, 95%)"])]
    return lines


def study_rows(listed: list[dict], now: float) -> list[dict]:
    """`eas studies` and the explorer's Studies page: one plain row per study of list_studies."""
    rows = []
    for row in listed:
        if not row["study"]:
            continue
        queue = row["queue"]
        rows.append({k: row[k] for k in ("study", "space", "data", "objectives", "started", "trials", "storage")}
                    | {"state": "malformed settings" if row.get("malformed") else queue.state_text(now),
                       "workers": sorted(queue.workers),
                       "budget": budget_text(queue.run, queue.counted, now) or (queue.problem or ""),
                       "priority": queue.run.priority if queue.run else ""} | row["counts"])
    return rows
