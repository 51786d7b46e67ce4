"""``pytest-sglang``: the baseline store and the reports from the command line.

``list`` the stored sessions, ``compare A B`` (stored sessions or JSON reports), ``report`` a
stored session or JSON report as Markdown or HTML, ``merge`` the JSON reports of sharded CI
jobs into one (and, with ``--markdown``, one Markdown summary). ``docs/baselines.md`` is the
guide.

Exit statuses, the same for every command: 0 done (no regression), 1 a regression
(``compare``), 2 a command line that cannot be carried out (unknown session, bad term,
nothing comparable, an output path refused), 3 a stored session or report that is damaged
(named, with what is wrong).
"""

from __future__ import annotations

import argparse
import datetime
import json
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, TextIO

from pytest_sglang.config.defaults import DEFAULT_STORAGE
from pytest_sglang.config.paths import OUTPUT_FIX, output_path, output_problem
from pytest_sglang.measure.session_format import (
    DamagedSession,
    StoredMeasurement,
    find_counterpart,
    read_document,
    report_measurements,
)
from pytest_sglang.measure.store import BaselineStore, StoredSession
from pytest_sglang.verdicts.baseline_options import (
    DEFAULT_CHECKS,
    NOTHING_COMPARED_OK,
    allows_nothing_compared,
    parse_compare_fail,
)
from pytest_sglang.verdicts.regression import refused_fields, regression_verdicts

__all__ = ["main"]

#: Exit statuses (the module docstring says when each is given).
OK, REGRESSION, MISUSE, DATA = 0, 1, 2, 3

#: The report sections made of entries; merged by concatenation.
SECTIONS = ("measurements", "verdicts", "servers")

#: What a report of a stored session saved without its verdicts says in their place.
NO_STORED_VERDICTS = (
    "This stored session was saved without its verdicts (by a pytest-sglang before they were "
    "stored); --baseline A judges its measurements against A."
)


class _Misuse(Exception):
    """A command line that cannot be carried out; exit status 2."""


def _output(option: str, value: str) -> Path:
    """Return an output path, judged as ``--sglang-report``'s is (``config/paths.py``).

    :raises _Misuse: naming the option and why its path is refused (a link, a directory...).
    """
    path = output_path(Path.cwd(), value)
    problem = output_problem(path)
    if problem is not None:
        raise _Misuse(f"{option} {value!r} {problem}; {OUTPUT_FIX}")
    return path


def _write(path: Path, value: str, text: str, *, append: bool = False) -> None:
    """Write ``text`` through the one atomic writer; a failure leaves the old file as it was."""
    from pytest_sglang.report.writing import write_atomic

    try:
        write_atomic(path, text, append=append)
    except OSError as exc:
        message = f"cannot write {value}: {exc.strerror or exc}; {value} was left as it was"
        raise _Misuse(message) from None


def _load(ref: str, store: BaselineStore) -> tuple[str, list[StoredMeasurement], dict[str, Any]]:
    """Return (name, measurements, report document) for a stored session or a JSON report."""
    path = Path(ref)
    if path.suffix == ".json" and path.is_file():
        document = read_document(path)
        if document.get("format") == "pytest-sglang-report":
            return str(path), report_measurements(document, str(path)), document
    try:
        session = store.find(ref)
    except (LookupError, ValueError) as exc:
        raise _Misuse(str(exc)) from None
    return session.id, list(session.measurements), session_document(session)


def session_document(session: StoredSession) -> dict[str, Any]:
    """Return a stored session as a results report (the JSON report's format).

    Its verdicts are those saved with it (none in a session saved before they were).
    """
    machine = dict(session.document.get("machine_info", {}))
    sglang = machine.get("sglang", {})
    labels = session.labels
    environment = {
        "plugin_version": str(labels.get("plugin_version") or ""),
        "python": str(machine.get("python_version", "")),
        "pytest": "",
        "platform": str(machine.get("system", "")),
        "sglang_versions": list(sglang.get("sglang_versions", [])),
        "gpus": list(sglang.get("gpus", [])),
        "commit": labels.get("commit"),
        "stored_session": session.id,
    }
    return {
        "format": "pytest-sglang-report",
        "version": 1,
        "complete": True,
        "interrupted": False,
        "exit_status": None,
        "created": session.datetime,
        "updated": session.datetime,
        "environment": environment,
        "servers": [
            {k: v for k, v in s.items() if k != "record"} for s in sglang.get("servers", [])
        ],
        "measurements": [dict(m.row) for m in session.measurements],
        "verdicts": list(sglang.get("verdicts", [])),
        # Not of the report format: whether the session was saved with its verdicts.
        "verdicts_stored": "verdicts" in sglang,
    }


def validate_report(document: Any) -> list[str]:
    """Return what keeps ``document`` from validating against the report schema (empty: ok)."""
    from pytest_sglang.server.schemas import violations

    return [str(v) for v in violations(document, "report", limit=sys.maxsize)]


def _union(lists: Iterable[Any]) -> list[Any]:
    """Return the entries of ``lists`` in order, each once (compared as JSON)."""
    seen: dict[str, Any] = {}
    for entries in lists:
        for entry in entries if isinstance(entries, list) else []:
            seen.setdefault(json.dumps(entry, sort_keys=True, default=str), entry)
    return list(seen.values())


def merge_reports(
    documents: Sequence[Any], *, now: datetime.datetime, sources: Sequence[str] = ()
) -> dict[str, Any]:
    """Merge JSON reports of sharded jobs into one report of the same format.

    Every list section (measurements, verdicts, servers, launches...) is concatenated, an
    entry present in several shards once. The environment is the first's, with the union of
    SGLang versions and GPUs (``shard`` dropped), and ``merged_from``: one line per report
    (its source, its ``--sglang-shard``, when it was made, whether it completed, its exit
    status, its counts). ``complete`` only when every shard was, ``interrupted`` when any was.

    :raises ValueError: no reports, or one that is not a pytest-sglang report.
    """
    if not documents:
        raise ValueError("nothing to merge")
    for index, document in enumerate(documents):
        if not isinstance(document, dict) or document.get("format") != "pytest-sglang-report":
            raise ValueError(f"report {index + 1} is not a pytest-sglang report")
    merged: dict[str, Any] = dict(documents[0])
    environment = dict(merged.get("environment", {}))
    for field in ("sglang_versions", "gpus"):
        environment[field] = _union(d.get("environment", {}).get(field) for d in documents)
    environment.pop("shard", None)  # the first shard's: says nothing of the merge
    environment["merged_from"] = [
        {
            "source": sources[index] if index < len(sources) else f"report {index + 1}",
            "shard": document.get("environment", {}).get("shard"),
            "created": str(document.get("created", "")),
            "complete": bool(document.get("complete")),
            "exit_status": document.get("exit_status"),
            "measurements": len(document.get("measurements", [])),
            "verdicts": len(document.get("verdicts", [])),
        }
        for index, document in enumerate(documents)
    ]
    statuses = [d.get("exit_status") for d in documents if d.get("exit_status") is not None]
    merged.update(
        environment=environment,
        complete=all(d.get("complete") for d in documents),
        interrupted=any(d.get("interrupted") for d in documents),
        exit_status=max(statuses) if statuses else None,
        created=min(str(d.get("created", "")) for d in documents),
        updated=now.isoformat(timespec="seconds"),
    )
    lists = {key for d in documents for key, value in d.items() if isinstance(value, list)}
    for section in lists.union(SECTIONS):
        if isinstance(merged.get(section, []), list):  # else: kept as the first report has it
            merged[section] = _union(d.get(section) for d in documents)
    return merged


def compare_measurements(
    baseline: Sequence[StoredMeasurement],
    candidate: Sequence[StoredMeasurement],
    terms: Sequence[str] = (),
    alpha: float = 0.05,
) -> tuple[list[str], list[dict[str, Any]], int]:
    """Judge every candidate measurement against its baseline counterpart.

    Nothing comparable is status 2 unless ``terms`` hold ``nothing-compared:ok``.

    :returns: (lines to print, verdict bodies, exit status).
    """
    checks = parse_compare_fail(terms) or DEFAULT_CHECKS
    lines: list[str] = []
    verdicts: list[dict[str, Any]] = []
    status = OK
    for fresh in candidate:
        match, near = find_counterpart(fresh.fingerprint, baseline)
        label = f"{fresh.row['server']} @ C={fresh.row['concurrency']}"
        if match is None:
            if near:
                fields = "; ".join(refused_fields(fresh.fingerprint, near[0].fingerprint))
                lines.append(f"[REFUSED] {label}: the fingerprints differ: {fields}")
            else:
                lines.append(f"[NO BASELINE] {label}: no measurement with its fingerprint")
            continue
        for verdict in regression_verdicts(
            fresh.result,
            match,
            checks,
            alpha,
            fresh_fingerprint=fresh.fingerprint,
            fresh_labels=fresh.labels,
        ):
            if isinstance(verdict, str):
                lines.append(f"[REFUSED] {label}: {verdict}")
                continue
            body = dict(verdict.as_dict())
            body["test"] = str(fresh.row.get("test", fresh.session))
            verdicts.append(body)
            lines.append(f"[{str(body['outcome']).upper()}] {label}: {verdict.summary}")
            lines += [f"    {row}" for row in verdict.table.splitlines()]
            lines += [f"    warning: {w}" for w in verdict.warnings]
            if body["outcome"] == "fail":
                status = REGRESSION
    if not verdicts and allows_nothing_compared(terms):
        lines.append(f"nothing was compared (allowed by {NOTHING_COMPARED_OK})")
    elif not verdicts:
        lines.append("nothing was compared: no measurement has a counterpart of its fingerprint")
        status = MISUSE
    return lines, verdicts, status


def _judged(verdict: Any) -> str | None:
    """Return what a regression verdict judged (measurement, metric, stored session), or None."""
    if not isinstance(verdict, dict) or verdict.get("kind") != "assert_no_regression":
        return None
    evidence = verdict.get("evidence") or {}
    # The fingerprint itself: a JSON report masks "fingerprint_key" (its name looks secret).
    judged = [verdict.get("metric"), evidence.get("fingerprint"), evidence.get("stored_session")]
    return json.dumps(judged, sort_keys=True)


def merged_markdown(merged: dict[str, Any]) -> str:
    """Return one Markdown summary of a merged report: its shards, then every table.

    The tables are those of ``--sglang-markdown``, over every shard's measurements and
    verdicts together (a server measured on one shard is a row in the same table as a server
    measured on another, when their workloads match).
    """
    shards = merged.get("environment", {}).get("merged_from", [])
    lines = [
        f"Merged from {len(shards)} reports:",
        "",
        "| report | shard | created | complete | exit status | measurements | verdicts |",
        "| --- | --- | --- | --- | ---: | ---: | ---: |",
    ]
    for shard in shards:
        complete = "yes" if shard.get("complete") else "no"
        cells = [shard.get("source"), shard.get("shard"), shard.get("created"), complete]
        cells += [shard.get(key) for key in ("exit_status", "measurements", "verdicts")]
        lines.append("| " + " | ".join(_cell(c) for c in cells) + " |")
    head, _, rest = _markdown(merged, "pytest-sglang results (merged)").partition("\n\n")
    return head + "\n\n" + "\n".join(lines) + "\n\n" + rest


def _markdown(document: dict[str, Any], title: str) -> str:
    """Return the ``--sglang-markdown`` tables of a report document."""
    from pytest_sglang.report.summary import emulated_speedups, render_markdown

    measurements, verdicts = document.get("measurements", []), document.get("verdicts", [])
    emulated = emulated_speedups(document.get("servers", []))
    return render_markdown(measurements, verdicts, title=title, emulated=emulated)


def _cell(value: object) -> str:
    text = "-" if value is None else str(value)
    return text.replace("\\", "\\\\").replace("|", "\\|").replace("\n", " ")


# -- the commands ---------------------------------------------------------------------------


def _cmd_list(args: argparse.Namespace, out: TextIO) -> int:
    store = BaselineStore(args.storage)
    sessions = store.sessions(damaged=True)
    if not sessions:
        print(f"no stored sessions in {store}", file=out)
    for session in sessions:
        if session.problem is not None:
            print(f"{session.id}  DAMAGED: {session.problem}", file=out)
            continue
        labels = session.labels
        what = ", ".join(f"{k} {labels[k]}" for k in ("sglang_version", "commit") if labels.get(k))
        count = len(session.measurements)
        print(f"{session.id}  {session.datetime[:19]}  {count} measurement(s)  {what}", file=out)
    damaged = [s for s in sessions if s.problem is not None]
    if damaged:
        sys.stderr.write(
            f"pytest-sglang list: {len(damaged)} damaged session file(s): repair them, or move "
            f"them out of {store.folder} to use the others\n"
        )
        return DATA
    return OK


def _cmd_compare(args: argparse.Namespace, out: TextIO) -> int:
    store = BaselineStore(args.storage)
    base_name, baseline, _ = _load(args.baseline, store)
    cand_name, candidate, _ = _load(args.candidate, store)
    lines, verdicts, status = compare_measurements(baseline, candidate, args.fail or (), args.alpha)
    terms = ", ".join(args.fail or [c.describe() for c in DEFAULT_CHECKS])
    print(f"{cand_name} (now) against {base_name} (stored); {terms}", file=out)
    for line in lines:
        print(line, file=out)
    result = {OK: "no regression", REGRESSION: "REGRESSION", MISUSE: "nothing compared"}
    if not verdicts:
        result[OK] = f"nothing compared (allowed by {NOTHING_COMPARED_OK})"
    print(f"result: {result[status]}", file=out)
    return status


def _cmd_report(args: argparse.Namespace, out: TextIO) -> int:
    to_file = args.output not in (None, "-")
    target = _output("-o", args.output) if to_file else None
    store = BaselineStore(args.storage)
    _, _, document = _load(args.source, store)
    baselines: list[dict[str, Any]] = []
    if args.baseline:
        _, stored, _ = _load(args.baseline, store)
        candidates = report_measurements(document, args.source)
        _, verdicts, _ = compare_measurements(stored, candidates, args.fail or (), args.alpha)
        # A verdict the report holds already (its session's gate against the same baseline)
        # is judged again here: the fresh one replaces it, so that it is counted once.
        again = {_judged(v) for v in verdicts}
        kept = [v for v in document.get("verdicts", []) if _judged(v) not in again]
        document = {**document, "verdicts": kept + verdicts}
        baselines = [dict(m.row, session=m.session) for m in stored]
    unstored = document.get("verdicts_stored") is False and not document.get("verdicts")
    fmt = args.format or ("html" if str(args.output).endswith(".html") else "markdown")
    if fmt == "html":
        try:
            from pytest_sglang.report.html import render_html
        except ImportError as exc:  # pragma: no cover - depends on the extra
            raise _Misuse(
                f"the HTML report needs the plotting extra: pip install 'pytest-sglang[report]' "
                f"({exc})"
            ) from None
        no_verdicts = NO_STORED_VERDICTS if unstored else None
        text = render_html(document, baselines=baselines, no_verdicts=no_verdicts)
    else:
        text = _markdown(document, f"pytest-sglang results: {args.source}")
    if target is None:
        out.write(text)
    else:
        _write(target, args.output, text)
        print(f"wrote {args.output}", file=out)
    return OK


def _cmd_merge(args: argparse.Namespace, out: TextIO) -> int:
    target = _output("the merged report", args.output)
    summary = None if args.markdown in (None, "-") else _output("--markdown", args.markdown)
    if summary is not None and summary == target:
        raise _Misuse(
            f"--markdown {args.markdown!r} is the merged report's own path: the two would "
            "corrupt each other; give each its own path"
        )
    documents = []
    for path in args.reports:
        try:
            documents.append(json.loads(Path(path).read_text(encoding="utf-8")))
        except (OSError, ValueError) as exc:
            raise _Misuse(f"cannot read {path}: {exc}") from None
    now = datetime.datetime.now(datetime.UTC)
    try:
        merged = merge_reports(documents, now=now, sources=list(args.reports))
    except ValueError as exc:
        raise _Misuse(str(exc)) from None
    problems = validate_report(merged)
    if problems:
        raise _Misuse("the merged report does not validate:\n  " + "\n  ".join(problems))
    _write(target, args.output, json.dumps(merged, indent=1) + "\n")
    print(
        f"merged {len(documents)} reports into {args.output}: "
        f"{len(merged['measurements'])} measurements, {len(merged['verdicts'])} verdicts",
        file=out,
    )
    if args.markdown:
        text = merged_markdown(merged)
        if summary is None:
            out.write(text)
        else:
            # Appended, as --sglang-markdown does: $GITHUB_STEP_SUMMARY collects steps;
            # a blank line first, so that a previous summary's last block ends there.
            follows = summary.is_file() and summary.stat().st_size > 0
            _write(summary, args.markdown, ("\n" if follows else "") + text, append=True)
            print(f"appended the Markdown summary to {args.markdown}", file=out)
    return OK


# -- the parser -----------------------------------------------------------------------------

#: What names a session or report on the command line.
_SOURCE = (
    "a stored session (latest, a number, a save name, a saved file) or a --sglang-report JSON file"
)


def _term(value: str) -> str:
    """Check one ``--fail`` value as argparse's ``type``: a bad term is a usage error (2)."""
    try:
        parse_compare_fail([value])
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return value


def make_parser() -> argparse.ArgumentParser:
    """Return the ``pytest-sglang`` argument parser (each command's handler as ``run``)."""
    parser = argparse.ArgumentParser(
        prog="pytest-sglang",
        description="pytest-sglang's stored baselines and reports (docs/baselines.md).",
    )
    parser.add_argument(
        "--storage",
        default=DEFAULT_STORAGE,
        metavar="URI",
        help=f"the baseline storage, as ini sglang_storage (default: {DEFAULT_STORAGE})",
    )
    # The regression terms, shared by the commands that judge (compare, report --baseline).
    judging = argparse.ArgumentParser(add_help=False)
    judging.add_argument(
        "--fail",
        action="append",
        type=_term,
        metavar="METRIC:PCT%",
        help="regression terms as --sglang-compare-fail (default output_throughput:3%%)",
    )
    judging.add_argument("--alpha", type=float, default=0.05, help="one-sided level (0.05)")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    commands.add_parser("list", help="list the stored sessions").set_defaults(run=_cmd_list)

    compare = commands.add_parser(
        "compare",
        parents=[judging],
        help="judge B (now) against A (stored): exit 1 on a regression",
        description=f"Compare every measurement of B with its counterpart of the same "
        f"fingerprint in A, each {_SOURCE}. Exit 1 on a regression, 0 otherwise, 2 on misuse "
        f"or when nothing could be compared (unless --fail {NOTHING_COMPARED_OK}), 3 when a "
        "stored session or report is damaged.",
    )
    compare.add_argument("baseline", metavar="A", help="the baseline (stored)")
    compare.add_argument("candidate", metavar="B", help="the candidate (now)")
    compare.set_defaults(run=_cmd_compare)

    report = commands.add_parser(
        "report",
        parents=[judging],
        help="render a stored session or JSON report as Markdown or HTML",
    )
    report.add_argument("source", help=_SOURCE)
    report.add_argument("-o", "--output", help="file to write (default: standard output)")
    report.add_argument("--format", choices=("markdown", "html"), help="default: by suffix")
    report.add_argument("--baseline", metavar="A", help="draw and judge against this baseline")
    report.set_defaults(run=_cmd_report)

    merge = commands.add_parser(
        "merge", help="merge JSON reports (sharded CI jobs) into one, validated"
    )
    merge.add_argument("output", help="the merged report to write")
    merge.add_argument("reports", nargs="+", help="the reports to merge")
    merge.add_argument(
        "--markdown",
        metavar="PATH",
        help="also append one Markdown summary of the merged report to PATH (every shard's "
        "tables; '-' for standard output), e.g. $GITHUB_STEP_SUMMARY",
    )
    merge.set_defaults(run=_cmd_merge)
    return parser


def main(argv: Sequence[str] | None = None, out: TextIO | None = None) -> int:
    """Run the command line; return the exit status."""
    args = make_parser().parse_args(argv)
    try:
        status: int = args.run(args, out or sys.stdout)
    except (_Misuse, DamagedSession) as exc:
        sys.stderr.write(f"pytest-sglang {args.command}: {exc}\n")
        return DATA if isinstance(exc, DamagedSession) else MISUSE
    return status


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
