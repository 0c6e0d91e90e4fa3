"""`receipts compare A B`: a verdict with the ratio, its interval and the lane's noise floor, or a refusal
that names each differing field."""

from __future__ import annotations

from typing import Optional

import typer
from rich.markup import escape

from receipts.analysis.compare import compare_in_store, to_json
from receipts.analysis.explain_run import for_comparison
from receipts.analysis.explain_run import to_json as explain_json
from receipts.cli.context import EXIT_REFUSED, console, err_console, handle_errors, settings
from receipts.cli.output import chosen_format, emit_record, format_option
from receipts.cli.render import ended_early_line, fmt_bytes, fmt_duration, fmt_ms, ratio_interval


def register(app: typer.Typer) -> None:
    app.command("compare")(compare)


@handle_errors
def compare(
    ctx: typer.Context,
    a: str = typer.Argument(..., help="Baseline receipt (id, id prefix or run name)."),
    b: str = typer.Argument(..., help="Candidate receipt."),
    as_json: bool = typer.Option(False, "--json", help="Machine-readable output (--format json)."),
    fmt: Optional[str] = format_option(piped="table"),
) -> None:
    """Compare B against A: faster / slower / no change / inconclusive against the lane's noise floor.

    Exit 3 when refused (identity incomplete or not the same lane).

    Example: receipts compare run_a run_b

    Text on a terminal and in a pipe; --format tsv or csv gives field/value rows, jsonl one line.
    """
    fmt = chosen_format(fmt, as_json=as_json, piped="table")
    with settings(ctx).read_store() as store:
        result = compare_in_store(store, store.resolve(a), store.resolve(b))
        why = for_comparison(store, result, against=a) if result.comparable else None  # None: a side has no profile
    if fmt != "table":
        emit_record({**to_json(result), "explain": explain_json(why) if why else None}, fmt)
    else:
        _render(result)
        if why is not None:  # both runs profiled: the explanation's renderer (and its numpy) only then
            from receipts.cli.explain_render import echo, text_lines

            echo(["", "why B differs (pairwise explain; against the lane's noise:",
                  "  receipts explain B --against tag:T):", *text_lines(why)[1:]])
    if not result.comparable:
        raise typer.Exit(EXIT_REFUSED)


def _render(c) -> None:
    _render_speed(c)
    from receipts.analysis.memory_geometry import moved
    from receipts.cli.memory_render import render_drift

    render_drift(c.memory_drift, moved(c.memory_drift or []))


def _render_speed(c) -> None:
    for label, s in (("A", c.a), ("B", c.b)):
        if s.ended_early:
            console.prose(f"{label}: " + ended_early_line(s.run_name, s.ended_early))
    for warning in c.warnings:
        err_console.prose(f"[yellow]warning:[/] {escape(warning)}")
    if not c.comparable:
        console.prose(f"[bold red]REFUSED[/] {escape(c.a.run_name)} ({c.a.id[:12]}) vs {escape(c.b.run_name)} ({c.b.id[:12]})")
        console.prose(escape(c.reason))
        for d in c.differences:
            console.prose(escape(f"  {d.field}: A={d.a!r}  B={d.b!r}  ({d.note})"))
        for note in c.resolution:
            console.prose(f"  · {escape(note)}")
        return
    console.prose(f"[bold]{escape(c.b.run_name)}[/] vs baseline [bold]{escape(c.a.run_name)}[/]: same lane")
    if c.a.time_to_train_s and c.b.time_to_train_s:
        # MLPerf's headline: one number per run, no interval; the verdict below judges the series behind it
        ratio = c.b.time_to_train_s / c.a.time_to_train_s
        console.prose(f"  [bold]time to train[/]: A {fmt_duration(c.a.time_to_train_s)}, B "
                      f"{fmt_duration(c.b.time_to_train_s)}: B/A {ratio:.4f} ({ratio - 1:+.2%}; run_start -> "
                      f"run_stop, one value per run: its noise is judged through the {c.a.series_unit} times below)")
    for label, s in (("A", c.a), ("B", c.b)):
        st = s.step_ms
        if st:
            console.prose(escape(f"  {label} {s.run_name}: median {fmt_ms(st.median)} (p10 {fmt_ms(st.p10)}, "
                                 f"p90 {fmt_ms(st.p90)}, CV {st.cv:.1%}, n={st.n}) {s.series_unit}s {s.first_step}..{s.last_step}, "
                                 f"{s.warmup_steps} warm-up excluded [{s.window_rule}]; "
                                 f"peak alloc {fmt_bytes(s.peak_allocated_bytes)}, "
                                 f"reserved {fmt_bytes(s.peak_reserved_bytes)}"))
        else:
            console.prose(escape(f"  {label} {s.run_name}: no steady-state steps"))
        if s.interval:
            n = s.interval.block_length
            console.prose(f"    median {s.interval.median:,.3f} ms [{s.interval.ci_low:,.3f}, {s.interval.ci_high:,.3f}] "
                          f"({s.interval.confidence:.0%}, moving blocks of {n} {s.series_unit}{'s' if n != 1 else ''})")
    _render_verdict(c)
    if c.straggler:
        console.prose(f"  stragglers: {escape(c.straggler['note'])}")
    if c.tokens_ratio:
        console.prose("  tokens/s B/A " + ratio_interval(c.tokens_ratio.value, c.tokens_ratio.ci_low, c.tokens_ratio.ci_high))
    for kind, diffs in (c.drift or {}).items():
        if diffs:
            console.prose(f"  {kind} drift:")
            for d in diffs:
                console.prose(escape(f"    {d.field}: {d.a!r} -> {d.b!r}" + (f" ({d.note})" if d.note else "")))
        else:
            console.prose(f"  {kind} drift: none")


_VERDICT_STYLE = {"faster": "bold green", "slower": "bold red", "no change": "bold", "inconclusive": "bold yellow"}


def _render_verdict(c) -> None:
    if c.noise_floor is not None:
        console.prose(f"  noise floor: {escape(c.noise_floor.note)}")
    d = c.detail
    if d is None:
        console.prose(f"  verdict: [{_VERDICT_STYLE['inconclusive']}]inconclusive[/]: {escape(c.reason)}")
        return
    console.prose(f"  B/A median {c.a.series_unit} time {ratio_interval(d.ratio, d.ci_low, d.ci_high)} "
                  f"({d.confidence:.0%}, run-to-run noise included)")
    console.prose(f"  verdict: [{_VERDICT_STYLE[d.verdict]}]{d.verdict}[/]: {escape(d.why)}")
    console.prose(f"  ({escape(d.method)})")
