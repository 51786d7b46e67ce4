"""``pytest-sglang``: the store and the reports from the command line.

``list`` the stored sessions, ``compare A B`` (stored sessions or JSON reports), ``report`` a
stored session or JSON report as
Markdown or HTML, ``merge`` several JSON reports (sharded CI jobs) into one, and one
Markdown summary from them (``--markdown``).
``docs/baselines.md`` is the guide.

Exit statuses, the same for every command: 0 done (no regression), 1 a regression
(``compare``), 2 a command line that cannot be carried out (unknown session, bad term,
nothing comparable), 3 a stored session or report that is damaged (named, with what is
wrong: cut short, not JSON, a malformed record).
"""

from __future__ import annotations

import argparse
import datetime
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TextIO

from pytest_sglang.config.defaults import DEFAULT_STORAGE
from pytest_sglang.config.paths import OUTPUT_FIX, output_path, output_problem
from pytest_sglang.errors import ComparisonRefused
from pytest_sglang.measure.session_format import (
    DamagedSession,
    StoredMeasurement,
    find_counterpart,
    read_document,
    report_measurements,
)
from pytest_sglang.measure.store import BaselineStore
from pytest_sglang.verdicts.baseline_options import (
    DEFAULT_CHECKS,
    NOTHING_COMPARED_OK,
    allows_nothing_compared,
    parse_compare_fail,
)
from pytest_sglang.verdicts.regression import regression_verdict

__all__ = ["main"]

#: Exit statuses (the module docstring says when each is given).
OK, REGRESSION, MISUSE, DATA = 0, 1, 2, 3


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
        raise _Misuse(
            f"cannot write {value}: {exc.strerror or exc}; {value} was left as it was"
        ) from None


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
    return session.id, list(session.measurements), session_document(session.id, session)


#: What a report of a stored session saved without its verdicts says in their place.
NO_STORED_VERDICTS = (
    "This stored session was saved without its verdicts (by a pytest-sglang before they were "
    "stored); --baseline A judges its measurements against A."
)


def session_document(name: str, session: Any) -> dict[str, Any]:
    """Return a stored session as a results report (the JSON report's format).

    Its verdicts are those saved with it (none in a session saved before they were).
    """
    document = session.document
    machine = dict(document.get("machine_info", {}))
    sglang = machine.get("sglang", {})
    labels = session.labels
    rows = [dict(m.row) for m in session.measurements]
    return {
        "format": "pytest-sglang-report", "version": 1, "complete": True,
        "interrupted": False, "exit_status": None,
        "created": session.datetime, "updated": session.datetime,
        "environment": {
            "plugin_version": str(labels.get("plugin_version") or ""),
            "python": str(machine.get("python_version", "")),
            "pytest": "", "platform": str(machine.get("system", "")),
            "sglang_versions": list(sglang.get("sglang_versions", [])),
            "gpus": list(sglang.get("gpus", [])),
            "commit": labels.get("commit"), "stored_session": name,
        },
        "servers": [
            {k: v for k, v in s.items() if k != "record"} for s in sglang.get("servers", [])
        ],
        "measurements": rows, "verdicts": list(sglang.get("verdicts", [])),
        # Not of the report format: whether the session was saved with its verdicts.
        "verdicts_stored": "verdicts" in sglang,
    }  # fmt: skip


def validate_report(document: Any) -> list[str]:
    """Return what keeps ``document`` from validating against the report schema (empty: ok)."""
    import importlib.resources

    import jsonschema

    text = importlib.resources.files("pytest_sglang").joinpath("schemas/report.schema.json")
    schema = json.loads(text.read_text(encoding="utf-8"))
    validator = jsonschema.Draft202012Validator(schema)
    return [
        f"{'/'.join(str(p) for p in error.absolute_path) or '(root)'}: {error.message}"
        for error in validator.iter_errors(document)
    ]


def _key(entry: Any) -> str:
    return json.dumps(entry, sort_keys=True, default=str)


def merge_reports(
    documents: Sequence[Any], *, now: datetime.datetime, sources: Sequence[str] = ()
) -> dict[str, Any]:
    """Merge JSON reports of sharded jobs into one report of the same format.

    Measurements, verdicts and servers are concatenated (an entry present in several
    shards once); the environment is the first's, with the union of SGLang versions and
    GPUs (``shard`` dropped), and ``merged_from``: one line per report (its source, its
    ``--sglang-shard``, when it was made, whether it completed, its exit status, its
    counts); ``complete`` only when every shard was,
    ``interrupted`` when any was.

    :raises ValueError: no reports, or one that is not a pytest-sglang report.
    """
    if not documents:
        raise ValueError("nothing to merge")
    for index, document in enumerate(documents):
        if not isinstance(document, dict) or document.get("format") != "pytest-sglang-report":
            raise ValueError(f"report {index + 1} is not a pytest-sglang report")
    first = documents[0]
    merged: dict[str, Any] = {
        key: value for key, value in first.items()
        if key not in ("measurements", "verdicts", "servers")
    }  # fmt: skip
    environment = dict(first.get("environment", {}))
    for field in ("sglang_versions", "gpus"):
        values: list[str] = []
        for document in documents:
            values += [v for v in document.get("environment", {}).get(field, []) if v not in values]
        environment[field] = values
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
    merged["environment"] = environment
    statuses = [d.get("exit_status") for d in documents if d.get("exit_status") is not None]
    merged.update(
        complete=all(d.get("complete") for d in documents),
        interrupted=any(d.get("interrupted") for d in documents),
        exit_status=max(statuses) if statuses else None,
        created=min(str(d.get("created", "")) for d in documents),
        updated=now.isoformat(timespec="seconds"),
    )
    for section in ("measurements", "verdicts", "servers"):
        seen: dict[str, Any] = {}
        for document in documents:
            for entry in document.get(section, []):
                seen.setdefault(_key(entry), entry)
        merged[section] = list(seen.values())
    # Sections other engineers' reports may carry (launches...): concatenated the same way.
    for document in documents[1:]:
        for key, value in document.items():
            if isinstance(value, list) and key not in ("measurements", "verdicts", "servers"):
                existing = merged.setdefault(key, [])
                if isinstance(existing, list):
                    existing += [v for v in value if _key(v) not in {_key(e) for e in existing}]
    return merged


def _cmd_list(args: argparse.Namespace, out: TextIO) -> int:
    store = BaselineStore(args.storage)
    sessions = store.sessions(damaged=True)
    if not sessions:
        print(f"no stored sessions in {store}", file=out)
        return OK
    for session in sessions:
        if session.problem is not None:
            print(f"{session.id}  DAMAGED: {session.problem}", file=out)
            continue
        labels = session.labels
        what = ", ".join(
            f"{k} {labels[k]}" for k in ("sglang_version", "commit") if labels.get(k)
        )  # fmt: skip
        print(f"{session.id}  {session.datetime[:19]}  {len(session.measurements)} "
              f"measurement(s)  {what}", file=out)  # fmt: skip
    damaged = [s for s in sessions if s.problem is not None]
    if damaged:
        sys.stderr.write(
            f"pytest-sglang list: {len(damaged)} damaged session file(s): repair them, or move "
            f"them out of {store.folder} to use the others\n"
        )
        return DATA
    return OK


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
    judged = 0
    for fresh in candidate:
        match, near = find_counterpart(fresh.fingerprint, baseline)
        label = f"{fresh.row['server']} @ C={fresh.row['concurrency']}"
        if match is None:
            if near:
                fields = "; ".join(
                    d.describe() for d in fresh.fingerprint.differences(near[0].fingerprint)
                    if d.refused
                )  # fmt: skip
                lines.append(f"[REFUSED] {label}: the fingerprints differ: {fields}")
            else:
                lines.append(f"[NO BASELINE] {label}: no measurement with its fingerprint")
            continue
        for check in checks:
            try:
                verdict = regression_verdict(
                    fresh.result, match, check.metric, check.tolerance, alpha,
                    fresh_fingerprint=fresh.fingerprint, fresh_labels=fresh.labels,
                )  # fmt: skip
            except (ComparisonRefused, ValueError) as exc:
                lines.append(f"[REFUSED] {label}: {exc}")
                continue
            judged += 1
            body = dict(verdict.as_dict())
            body["test"] = str(fresh.row.get("test", fresh.session))
            verdicts.append(body)
            tag = verdict.outcome.value.upper() if not isinstance(verdict.outcome, str) else "?"
            lines.append(f"[{tag}] {label}: {verdict.summary}")
            lines += [f"    {row}" for row in verdict.table.splitlines()]
            lines += [f"    warning: {w}" for w in verdict.warnings]
            if body["outcome"] == "fail":
                status = REGRESSION
    if judged == 0 and allows_nothing_compared(terms):
        lines.append(f"nothing was compared (allowed by {NOTHING_COMPARED_OK})")
    elif judged == 0:
        lines.append("nothing was compared: no measurement has a counterpart of its fingerprint")
        status = max(status, MISUSE)
    return lines, verdicts, status


def _cmd_compare(args: argparse.Namespace, out: TextIO) -> int:
    store = BaselineStore(args.storage)
    base_name, baseline, _ = _load(args.baseline, store)
    cand_name, candidate, _ = _load(args.candidate, store)
    try:
        lines, verdicts, status = compare_measurements(
            baseline, candidate, args.fail or (), args.alpha
        )
    except ValueError as exc:
        raise _Misuse(str(exc)) from None
    terms = ", ".join(args.fail or [c.describe() for c in DEFAULT_CHECKS])
    print(f"{cand_name} (now) against {base_name} (stored); {terms}", file=out)
    for line in lines:
        print(line, file=out)
    verdict = {OK: "no regression", REGRESSION: "REGRESSION", MISUSE: "nothing compared"}
    if not verdicts:
        verdict[OK] = f"nothing compared (allowed by {NOTHING_COMPARED_OK})"
    print(f"result: {verdict[status]}", file=out)
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
        _, verdicts, _ = compare_measurements(stored, candidates, args.fail or ())
        # A verdict the report holds already (its session's gate against the same baseline)
        # is judged again here: the fresh one replaces it, so that it is counted once.
        again = {_judged(v) for v in verdicts}
        document = dict(document)
        document["verdicts"] = [
            v for v in document.get("verdicts", []) if _judged(v) not in again
        ] + verdicts
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
        text = render_html(
            document, baselines=baselines, no_verdicts=NO_STORED_VERDICTS if unstored else None
        )
    else:
        from pytest_sglang.report.summary import emulated_speedups, render_markdown

        text = render_markdown(document.get("measurements", []), document.get("verdicts", []),
                               title=f"pytest-sglang results: {args.source}",
                               emulated=emulated_speedups(document.get("servers", [])))  # fmt: skip
    if target is None:
        out.write(text)
    else:
        _write(target, args.output, text)
        print(f"wrote {args.output}", file=out)
    return OK


def _judged(verdict: Any) -> str | None:
    """Return what a regression verdict judged (measurement, metric, stored session), or None."""
    if not isinstance(verdict, dict) or verdict.get("kind") != "assert_no_regression":
        return None
    evidence = verdict.get("evidence") or {}
    # The fingerprint itself: a JSON report masks "fingerprint_key" (its name looks secret).
    return json.dumps([verdict.get("metric"), evidence.get("fingerprint"),
                       evidence.get("stored_session")], sort_keys=True)  # fmt: skip


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
    try:
        merged = merge_reports(
            documents, now=datetime.datetime.now(datetime.UTC), sources=list(args.reports)
        )
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


def merged_markdown(merged: dict[str, Any]) -> str:
    """Return one Markdown summary of a merged report: its shards, then every table.

    The tables are those of ``--sglang-markdown``, over every shard's measurements and
    verdicts together (a server measured on one shard is a row in the same table as a server
    measured on another, when their workloads match).
    """
    from pytest_sglang.report.summary import emulated_speedups, render_markdown

    shards = merged.get("environment", {}).get("merged_from", [])
    lines = [
        f"Merged from {len(shards)} reports:",
        "",
        "| report | shard | created | complete | exit status | measurements | verdicts |",
        "| --- | --- | --- | --- | ---: | ---: | ---: |",
    ]
    for shard in shards:
        cells = [shard.get("source"), shard.get("shard"), shard.get("created"),
                 "yes" if shard.get("complete") else "no", shard.get("exit_status"),
                 shard.get("measurements"), shard.get("verdicts")]  # fmt: skip
        lines.append("| " + " | ".join(_cell(c) for c in cells) + " |")
    body = render_markdown(
        merged.get("measurements", []), merged.get("verdicts", []),
        title="pytest-sglang results (merged)",
        emulated=emulated_speedups(merged.get("servers", [])),
    )  # fmt: skip
    head, _, rest = body.partition("\n\n")
    return head + "\n\n" + "\n".join(lines) + "\n\n" + rest


def _cell(value: object) -> str:
    text = "-" if value is None else str(value)
    return text.replace("\\", "\\\\").replace("|", "\\|").replace("\n", " ")


def make_parser() -> argparse.ArgumentParser:
    """Return the ``pytest-sglang`` argument parser."""
    parser = argparse.ArgumentParser(
        prog="pytest-sglang",
        description="pytest-sglang's stored baselines and reports (docs/baselines.md).",
    )
    parser.add_argument(
        "--storage", default=DEFAULT_STORAGE, metavar="URI",
        help=f"baseline storage, as ini sglang_storage (default: {DEFAULT_STORAGE})",
    )  # fmt: skip
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    commands.add_parser("list", help="list the stored sessions")
    compare = commands.add_parser(
        "compare", help="judge B (now) against A (stored): exit 1 on a regression",
        description="Compare every measurement of B with its counterpart of the same "
        "fingerprint in A. A and B are stored sessions (latest, a number, a save name, a "
        "saved file) or --sglang-report JSON files. Exit 1 on a regression, 0 otherwise, "
        f"2 on misuse or when nothing could be compared (unless --fail {NOTHING_COMPARED_OK}), "
        "3 when a stored session or report is damaged.",
    )  # fmt: skip
    compare.add_argument("baseline", metavar="A", help="the baseline (stored)")
    compare.add_argument("candidate", metavar="B", help="the candidate (now)")
    compare.add_argument(
        "--fail", action="append", metavar="METRIC:PCT%",
        help="regression terms as --sglang-compare-fail (default output_throughput:3%%)",
    )  # fmt: skip
    compare.add_argument("--alpha", type=float, default=0.05, help="one-sided level (0.05)")
    report = commands.add_parser(
        "report", help="render a stored session or JSON report as Markdown or HTML"
    )
    report.add_argument("source", help="a stored session or a --sglang-report JSON file")
    report.add_argument("-o", "--output", help="file to write (default: standard output)")
    report.add_argument("--format", choices=("markdown", "html"), help="default: by suffix")
    report.add_argument("--baseline", metavar="A", help="draw and judge against this baseline")
    report.add_argument("--fail", action="append", metavar="METRIC:PCT%", help="as compare")
    merge = commands.add_parser(
        "merge", help="merge JSON reports (sharded CI jobs) into one, validated"
    )
    merge.add_argument("output", help="the merged report to write")
    merge.add_argument("reports", nargs="+", help="the reports to merge")
    merge.add_argument(
        "--markdown", metavar="PATH",
        help="also append one Markdown summary of the merged report to PATH (every shard's "
        "tables; '-' for standard output), e.g. $GITHUB_STEP_SUMMARY",
    )  # fmt: skip
    return parser


def main(argv: Sequence[str] | None = None, out: TextIO | None = None) -> int:
    """Run the command line; return the exit status."""
    out = out or sys.stdout
    args = make_parser().parse_args(argv)
    handlers = {"list": _cmd_list, "compare": _cmd_compare, "report": _cmd_report,
                "merge": _cmd_merge}  # fmt: skip
    try:
        return handlers[args.command](args, out)
    except _Misuse as exc:
        sys.stderr.write(f"pytest-sglang {args.command}: {exc}\n")
        return MISUSE
    except DamagedSession as exc:
        sys.stderr.write(f"pytest-sglang {args.command}: {exc}\n")
        return DATA


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
