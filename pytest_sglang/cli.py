"""``pytest-sglang``: list, compare, report and merge stored sessions and JSON reports.

Exit statuses, the same for every command (``docs/baselines.md``): 0 done, 1 a regression
(``compare``), 2 a command line that cannot be carried out, 3 a stored session or report that
is damaged (named, with what is wrong).
"""

from __future__ import annotations

import argparse
import datetime
import json
import sys
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any, TextIO

from pytest_sglang.config.options import DEFAULT_STORAGE
from pytest_sglang.config.paths import OUTPUT_FIX, output_path, output_problem
from pytest_sglang.measure.session_format import DamagedSession, StoredMeasurement, read_document
from pytest_sglang.measure.store import BaselineStore, StoredSession
from pytest_sglang.report.entries import REPORT_FORMAT
from pytest_sglang.report.writing import append_summary, json_text, write_atomic
from pytest_sglang.verdicts.baseline_options import (
    DEFAULT_CHECKS,
    NOTHING_COMPARED_OK,
    allows_nothing_compared,
    parse_compare_fail,
)
from pytest_sglang.verdicts.regression import judge

__all__ = ["main"]

OK, REGRESSION, MISUSE, DATA = 0, 1, 2, 3

#: What a report of a stored session saved without its verdicts says in their place.
NO_STORED_VERDICTS = (
    "This stored session was saved without its verdicts (by a pytest-sglang before they were "
    "stored); --baseline A judges its measurements against A."
)


class _Misuse(Exception):
    """A command line that cannot be carried out; exit status 2."""


def _output(option: str, value: str | None) -> Path | None:
    """Return an output path, refused as ``--sglang-report``'s is (None: standard output)."""
    if value in (None, "-"):
        return None
    path = output_path(Path.cwd(), value)
    if (problem := output_problem(path)) is not None:
        raise _Misuse(f"{option} {value!r} {problem}; {OUTPUT_FIX}")
    return path


def _emit(
    text: str, target: Path | None, value: str, out: TextIO, done: str, *, summary: bool = False
) -> None:
    """Write ``text`` to standard output, or atomically to ``target`` (a ``summary`` appended)."""
    if target is None:
        out.write(text)
        return
    try:
        (append_summary if summary else write_atomic)(target, text)
    except OSError as exc:
        message = f"cannot write {value}: {exc.strerror or exc}; {value} was left as it was"
        raise _Misuse(message) from None
    print(done, file=out)


def _find(ref: str, store: BaselineStore) -> StoredSession:
    """Return the stored session or JSON report ``ref`` names (a usage error if none)."""
    try:
        return store.find(ref)
    except (LookupError, ValueError) as exc:
        raise _Misuse(str(exc)) from None


def session_document(session: StoredSession) -> dict[str, Any]:
    """Return a stored session as a JSON report, with the verdicts saved with it (if any)."""
    if session.document.get("format") == REPORT_FORMAT:
        return dict(session.document)
    machine = dict(session.document.get("machine_info", {}))
    sglang = machine.get("sglang", {})
    return {
        "format": REPORT_FORMAT,
        "version": 1,
        "complete": True,
        "interrupted": False,
        "exit_status": None,
        "created": session.datetime,
        "updated": session.datetime,
        "environment": {
            "plugin_version": str(session.labels.get("plugin_version") or ""),
            "python": str(machine.get("python_version", "")),
            "pytest": "",
            "platform": str(machine.get("system", "")),
            "sglang_versions": list(sglang.get("sglang_versions", [])),
            "gpus": list(sglang.get("gpus", [])),
            "commit": session.labels.get("commit"),
            "stored_session": session.id,
        },
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

    found = violations(document, "report")
    return [f"at {v.json_path}: {v.message} (schema report.schema.json)" for v in found]


def _union(lists: Iterable[Any]) -> list[Any]:
    """Return the entries of ``lists`` in order, each once (compared as JSON)."""
    seen: dict[str, Any] = {}
    for entries in lists:
        for entry in entries if isinstance(entries, list) else []:
            seen.setdefault(json.dumps(entry, sort_keys=True, default=str), entry)
    return list(seen.values())


def merge_reports(
    documents: Sequence[dict[str, Any]], *, now: datetime.datetime, sources: Sequence[str]
) -> dict[str, Any]:
    """Merge the JSON reports of sharded jobs into one report of the same format.

    Every list section is the union of the shards' (an entry in several shards once); the
    environment is the first's, with every shard's SGLang versions and GPUs and one
    ``merged_from`` line per shard (``docs/ci.md``).
    """
    merged = dict(documents[0])
    environment = dict(merged.get("environment", {}))
    for field in ("sglang_versions", "gpus"):
        environment[field] = _union(d.get("environment", {}).get(field) for d in documents)
    environment.pop("shard", None)  # the first shard's: says nothing of the merge
    environment["merged_from"] = [
        {
            "source": source,
            "shard": document.get("environment", {}).get("shard"),
            "created": str(document.get("created", "")),
            "complete": bool(document.get("complete")),
            "exit_status": document.get("exit_status"),
            "measurements": len(document.get("measurements", [])),
            "verdicts": len(document.get("verdicts", [])),
        }
        for source, document in zip(sources, documents, strict=True)
    ]
    statuses = [d["exit_status"] for d in documents if d.get("exit_status") is not None]
    merged.update(
        environment=environment,
        complete=all(d.get("complete") for d in documents),
        interrupted=any(d.get("interrupted") for d in documents),
        exit_status=max(statuses, default=None),
        created=min(str(d.get("created", "")) for d in documents),
        updated=now.isoformat(timespec="seconds"),
    )
    sections = {key for d in documents for key, value in d.items() if isinstance(value, list)}
    for section in sections.union(("measurements", "verdicts", "servers")):
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

    Returns the lines to print, the verdict bodies and the exit status.
    """
    checks = parse_compare_fail(terms) or DEFAULT_CHECKS
    lines: list[str] = []
    verdicts: list[dict[str, Any]] = []
    status = OK
    for fresh in candidate:
        for judged in judge(fresh, baseline, checks, alpha):
            lines.append(f"[{judged.tag}] {judged.label}: {judged.text}")
            if (verdict := judged.verdict) is None:
                continue
            verdicts.append(
                {**verdict.as_dict(), "test": str(fresh.row.get("test", fresh.session))}
            )
            lines += [f"    {row}" for row in verdict.table.splitlines()]
            lines += [f"    warning: {w}" for w in verdict.warnings]
            status = REGRESSION if judged.outcome == "fail" else status
    if not verdicts and allows_nothing_compared(terms):
        lines.append(f"nothing was compared (allowed by {NOTHING_COMPARED_OK})")
    elif not verdicts:
        lines.append("nothing was compared: no measurement has a counterpart of its fingerprint")
        status = MISUSE
    return lines, verdicts, status


def _judged(verdict: Any) -> str | None:
    """Return what a regression verdict judged (metric, fingerprint, stored session), or None."""
    if not isinstance(verdict, dict) or verdict.get("kind") != "assert_no_regression":
        return None
    evidence = verdict.get("evidence") or {}
    # The fingerprint itself: a JSON report masks "fingerprint_key" (its name looks secret).
    judged = [verdict.get("metric"), evidence.get("fingerprint"), evidence.get("stored_session")]
    return json.dumps(judged, sort_keys=True)


def _markdown(document: dict[str, Any], title: str, shards: Sequence[Any] = ()) -> str:
    """Return the ``--sglang-markdown`` summary of a report (of a merge: its shards first)."""
    from pytest_sglang.report.summary import render_markdown, table

    head = ["report", "shard", "created", "complete", "exit status", "measurements", "verdicts"]
    rows = [
        [s.get("source"), s.get("shard"), s.get("created"), "yes" if s.get("complete") else "no"]
        + [s.get(key) for key in ("exit_status", "measurements", "verdicts")]
        for s in shards
    ]
    lead = [f"Merged from {len(shards)} reports:", "", *table(head, rows, 4, markdown=True)]
    measurements, verdicts = document.get("measurements", []), document.get("verdicts", [])
    servers = document.get("servers", [])
    return render_markdown(
        measurements, verdicts, title=title, servers=servers, lead=lead if shards else ()
    )


# -- the commands ---------------------------------------------------------------------------


def _cmd_list(args: argparse.Namespace, out: TextIO) -> int:
    store = args.storage
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
    damaged = sum(s.problem is not None for s in sessions)
    if damaged:
        sys.stderr.write(
            f"pytest-sglang list: {damaged} damaged session file(s): repair them, or move "
            f"them out of {store.folder} to use the others\n"
        )
    return DATA if damaged else OK


def _cmd_compare(args: argparse.Namespace, out: TextIO) -> int:
    baseline, candidate = _find(args.baseline, args.storage), _find(args.candidate, args.storage)
    lines, verdicts, status = compare_measurements(
        baseline.measurements, candidate.measurements, args.fail or (), args.alpha
    )
    terms = ", ".join(args.fail or [c.describe() for c in DEFAULT_CHECKS])
    print(f"{candidate.id} (now) against {baseline.id} (stored); {terms}", file=out)
    print("\n".join(lines), file=out)
    result = {OK: "no regression", REGRESSION: "REGRESSION", MISUSE: "nothing compared"}
    if not verdicts:
        result[OK] = f"nothing compared (allowed by {NOTHING_COMPARED_OK})"
    print(f"result: {result[status]}", file=out)
    return status


def _cmd_report(args: argparse.Namespace, out: TextIO) -> int:
    target = _output("-o", args.output)
    source = _find(args.source, args.storage)
    document = session_document(source)
    baselines: list[dict[str, Any]] = []
    if args.baseline:
        base = _find(args.baseline, args.storage).measurements
        _, verdicts, _ = compare_measurements(
            base, source.measurements, args.fail or (), args.alpha
        )
        # A verdict the report holds already (its session's gate against the same baseline)
        # is judged again here: the fresh one replaces it, so that it is counted once.
        again = {_judged(v) for v in verdicts}
        kept = [v for v in document.get("verdicts", []) if _judged(v) not in again]
        document = {**document, "verdicts": kept + verdicts}
        baselines = [dict(m.row, session=m.session) for m in base]
    unstored = document.get("verdicts_stored") is False and not document.get("verdicts")
    if (args.format or ("html" if str(args.output).endswith(".html") else "")) == "html":
        from pytest_sglang.report.html import render_html

        no_verdicts = NO_STORED_VERDICTS if unstored else None
        try:
            text = render_html(document, baselines=baselines, no_verdicts=no_verdicts)
        except ImportError as exc:  # matplotlib, of the "report" extra
            extra = "pip install 'pytest-sglang[report]'"
            raise _Misuse(f"the HTML report needs the plotting extra: {extra} ({exc})") from None
    else:
        text = _markdown(document, f"pytest-sglang results: {args.source}")
    _emit(text, target, args.output, out, f"wrote {args.output}")
    return OK


def _cmd_merge(args: argparse.Namespace, out: TextIO) -> int:
    target = _output("the merged report", args.output)
    markdown = _output("--markdown", args.markdown)
    if markdown is not None and markdown == target:
        raise _Misuse(
            f"--markdown {args.markdown!r} is the merged report's own path: the two would "
            "corrupt each other; give each its own path"
        )
    documents = []
    for index, source in enumerate(args.reports, 1):
        if not Path(source).is_file():
            raise _Misuse(f"cannot read {source}: no such file; give a --sglang-report file")
        if (document := read_document(Path(source))).get("format") != REPORT_FORMAT:
            raise _Misuse(f"report {index} ({source}) is not a pytest-sglang report")
        documents.append(document)
    now = datetime.datetime.now(datetime.UTC)
    merged = merge_reports(documents, now=now, sources=args.reports)
    problems = validate_report(merged)
    if problems:
        raise _Misuse("the merged report does not validate:\n  " + "\n  ".join(problems))
    counts = f"{len(merged['measurements'])} measurements, {len(merged['verdicts'])} verdicts"
    done = f"merged {len(documents)} reports into {args.output}: {counts}"
    _emit(json_text(merged), target, args.output, out, done)
    if args.markdown:
        shards = merged["environment"]["merged_from"]
        text = _markdown(merged, "pytest-sglang results (merged)", shards)
        done = f"appended the Markdown summary to {args.markdown}"
        _emit(text, markdown, args.markdown, out, done, summary=True)
    return OK


# -- the parser -----------------------------------------------------------------------------


def _checked(parse: Callable[[str], Any]) -> Callable[[str], Any]:
    """Return ``parse`` as argparse's ``type``: a value it refuses is a usage error (2)."""

    def check(value: str) -> Any:
        try:
            return parse(value)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    return check


def _term(value: str) -> str:
    """Check one ``--fail`` term; return it as written."""
    parse_compare_fail([value])
    return value


def make_parser() -> argparse.ArgumentParser:
    """Return the ``pytest-sglang`` argument parser (each command's handler as ``run``)."""
    source = "a stored session (latest, a number, a save name, a file) or a JSON report"
    parser = argparse.ArgumentParser(
        prog="pytest-sglang", description="Stored baselines and reports (docs/baselines.md)."
    )
    store = _checked(BaselineStore)
    parser.add_argument("--storage", type=store, default=DEFAULT_STORAGE, metavar="URI")
    judging = argparse.ArgumentParser(add_help=False)
    judging.add_argument("--fail", action="append", type=_checked(_term), metavar="METRIC:PCT%")
    judging.add_argument("--alpha", type=float, default=0.05, help="one-sided level")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    commands.add_parser("list", help="list the stored sessions").set_defaults(run=_cmd_list)
    compare = commands.add_parser(
        "compare", parents=[judging], help="judge B (now) against A (stored)"
    )
    compare.add_argument("baseline", metavar="A", help=source)
    compare.add_argument("candidate", metavar="B", help=source)
    compare.set_defaults(run=_cmd_compare)
    report = commands.add_parser("report", parents=[judging], help="Markdown or HTML")
    report.add_argument("source", help=source)
    report.add_argument("-o", "--output", help="file to write (default: standard output)")
    report.add_argument("--format", choices=("markdown", "html"), help="default: by suffix")
    report.add_argument("--baseline", metavar="A", help="draw and judge against this baseline")
    report.set_defaults(run=_cmd_report)
    merge = commands.add_parser("merge", help="merge JSON reports of sharded jobs into one")
    merge.add_argument("output", help="the merged report to write")
    merge.add_argument("reports", nargs="+", help="the reports to merge")
    merge.add_argument("--markdown", metavar="PATH", help="append a summary to PATH ('-': out)")
    merge.set_defaults(run=_cmd_merge)
    return parser


def main(argv: Sequence[str] | None = None, out: TextIO | None = None) -> int:
    """Run the command line; return the exit status."""
    args = make_parser().parse_args(argv)
    try:
        status: int = args.run(args, out or sys.stdout)
    except (_Misuse, DamagedSession, OSError) as exc:  # OSError: a store that cannot be used
        sys.stderr.write(f"pytest-sglang {args.command}: {exc}\n")
        return DATA if isinstance(exc, DamagedSession) else MISUSE
    return status


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
