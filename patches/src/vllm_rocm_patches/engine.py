"""status / apply / verify / revert: decide each entry's state from the files on disk, act all-or-nothing."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import __version__, fsio, pysource, series, unidiff
from .errors import EXIT_FAILED, EXIT_OK, PatchConflict, WriteError
from .target import Target

log = logging.getLogger(__name__)

# Per-entry states (the words `status` prints, with '-' shown as ' ').
APPLICABLE = "applicable"
APPLIED = "applied"
FIXED_UPSTREAM = "fixed-upstream"
NOT_NEEDED = "not-needed"
CONFLICT = "conflict"  # the files are not what the series expects (hash mismatch, patch does not apply): refused
AFFECTED = "affected"  # unknown release whose file still has the bug: the series has nothing for it
UNKNOWN = "unknown"  # unknown release whose file does not say whether it has the bug: fail closed, but no conflict
OK_STATES = (APPLICABLE, APPLIED, FIXED_UPSTREAM, NOT_NEEDED)


@dataclass
class EntryResult:
    id: str
    fix: str
    kind: str  # patch | fixed-upstream | not-needed | content (release unknown to the series)
    state: str
    message: str
    action: str = "none"  # none | applied | reverted | would-apply | would-revert
    files: dict[str, dict[str, Any]] = field(default_factory=dict)
    postconditions: list[pysource.CheckResult] = field(default_factory=list)
    evidence: dict[str, bool] = field(default_factory=dict)
    # new file contents for apply (forward) and revert (reverse), computed in memory during analysis
    forward: dict[str, bytes] = field(default_factory=dict)
    reverse: dict[str, bytes] = field(default_factory=dict)
    spec: series.Entry | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "fix": self.fix,
            "kind": self.kind,
            "state": self.state,
            "message": self.message,
            "action": self.action,
            "files": self.files,
            "evidence": self.evidence,
            "postconditions": [c.to_json() for c in self.postconditions],
        }


@dataclass
class Report:
    command: str
    target: Target
    series_root: Path
    series_id: str | None
    series_sha256: str
    known: bool
    entries: list[EntryResult] = field(default_factory=list)
    exit_code: int = EXIT_OK
    changed: bool = False
    summary: str = ""
    record_notes: list[str] = field(default_factory=list)
    # which release files of the series the target's files are byte-identical to, e.g. "0.10.2 pristine"
    content_matches: list[str] = field(default_factory=list)
    series_why: str = ""  # which series serves this release and why (its own, or one that covers it)
    # known-issues/known-issues.json judged for this release (known_issues.release_report), and its path
    known_issues: list[dict[str, Any]] = field(default_factory=list)
    known_issues_source: str = ""

    @property
    def fixed_issues(self) -> list[str]:
        """Issue ids whose patch of the series is applied on the target (what an image built from it fixes)."""
        return [
            k["id"]
            for k in self.known_issues
            if k.get("state") == "fixed-by-series" and k.get("patch_state") == APPLIED
        ]

    def patch_states(self) -> dict[str, str]:
        """`vllm-<release>/<patch file>` -> state, the patch ids the known-issues data names."""
        return {f"{self.series_id}/{e.id}": e.state for e in self.entries if e.kind == "patch"}

    def to_json(self) -> dict[str, Any]:
        return {
            "tool": "vllm-rocm-patches",
            "tool_version": __version__,
            "command": self.command,
            "timestamp": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "target": str(self.target.root),
            "release": {
                "version": self.target.version,
                "release": self.target.release,
                "sources": self.target.sources,
                "known_to_series": self.known,
                "series_why": self.series_why,
                "tree": self.target.kind,
                "content_matches": self.content_matches,
            },
            "series": {"id": self.series_id, "sha256": self.series_sha256, "dir": str(self.series_root)},
            "entries": [e.to_json() for e in self.entries],
            "changed": self.changed,
            "ok": self.exit_code == EXIT_OK,
            "exit_code": self.exit_code,
            "summary": self.summary,
            "record": self.record_notes,
            "known_issues": {
                "source": self.known_issues_source,
                "fixed_by_applied_patches": self.fixed_issues,
                "issues": self.known_issues,
            },
        }


def _read(root: Path, rel: str) -> bytes | None:
    try:
        return (root / rel).read_bytes()
    except FileNotFoundError:
        return None


def _decode(data: bytes, rel: str) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise PatchConflict(f"{rel} is not UTF-8 text: {exc}") from None


def _checks(entry: series.Entry, contents: dict[str, bytes]) -> list[pysource.CheckResult]:
    results = []
    for cond in entry.postconditions:
        data = contents.get(cond["file"])
        if data is None:
            results.append(pysource.CheckResult(f"{cond['file']} exists", False, "missing"))
        else:
            results.append(pysource.check(_decode(data, cond["file"]), cond["file"], cond))
    return results


def _patch_texts(fps: list[unidiff.FilePatch], current: dict[str, bytes], reverse: bool) -> dict[str, bytes]:
    out = {}
    for fp in fps:
        fp = fp.reversed() if reverse else fp
        out[fp.path] = unidiff.apply_to_text(_decode(current[fp.path], fp.path), fp).encode("utf-8")
    return out


def _analyze_patches(entries: list[series.Entry], root: Path, release: str) -> dict[int, EntryResult]:
    """The state of every patch of a release, stacked patches included.

    Each touched file's hash must be one link of its chain (released file, then the result of each patch that
    touches it, in series order): the link says how far the stack is applied to that file. A patch is applied
    when every file it touches is at or past its link, applicable when every one is before it; the texts that
    `apply` / `revert` would write are computed here in series order (reverse order for revert), each step
    checked against the pinned hash, before anything is written.
    """
    chains = series.file_chains(entries)
    disk: dict[str, bytes] = {}
    position: dict[str, int | None] = {}
    problems: dict[str, str] = {}
    for rel, chain in chains.items():
        data = _read(root, rel)
        if data is None:
            problems[rel] = f"{rel}: file missing (vLLM {release} ships it)"
            continue
        disk[rel] = data
        actual = fsio.sha256_bytes(data)
        # the last matching link: a patch that changes nothing in a file would repeat a hash
        links = [i for i, h in enumerate(chain) if h == actual]
        position[rel] = links[-1] if links else None
        if not links:
            problems[rel] = (
                f"{rel}: sha256 mismatch: expected the released file {chain[0]} (vLLM {release}) or the result of"
                f" the series' patches ({', '.join(chain[1:])}), found {actual}; refusing to patch a file that is"
                " not the released one"
            )
    results: dict[int, EntryResult] = {}
    seen: dict[str, int] = {}  # file -> how many patches so far touched it (the entry's link index - 1)
    for idx, entry in enumerate(entries):
        if entry.state != "patch":
            continue
        res = EntryResult(entry.id, entry.fix, "patch", CONFLICT, "", spec=entry)
        results[idx] = res
        states = set()
        msgs = []
        for rel, hashes in entry.files.items():
            link = seen.get(rel, 0) + 1
            seen[rel] = link
            before = fsio.sha256_bytes(disk[rel]) if rel in disk else None
            res.files[rel] = {
                "before": before,
                "pristine_sha256": hashes["pristine_sha256"],
                "patched_sha256": hashes["patched_sha256"],
            }
            if rel in problems:
                msgs.append(problems[rel])
            else:
                states.add(APPLIED if (position[rel] or 0) >= link else APPLICABLE)
        if msgs:
            res.message = "; ".join(dict.fromkeys(msgs))
        elif len(states) > 1:
            res.message = "some files are patched and others pristine: " + ", ".join(
                f"{k}={v['before']}" for k, v in res.files.items()
            )
        else:
            res.state = states.pop()
            res.message = "already applied" if res.state == APPLIED else "pristine, the patch applies exactly"
            res.postconditions = _checks(entry, disk)  # what the files on disk say now
    _stack_texts(entries, results, disk, forward=True)
    _stack_texts(entries, results, disk, forward=False)
    return results


def _stack_texts(
    entries: list[series.Entry], results: dict[int, EntryResult], disk: dict[str, bytes], forward: bool
) -> None:
    """Fill `forward` (apply every applicable patch in series order) or `reverse` (revert every applied patch in
    reverse order) with the texts after each step; a step that fails marks its patch as a conflict."""
    work = dict(disk)
    order = sorted(results) if forward else sorted(results, reverse=True)
    want = APPLICABLE if forward else APPLIED
    for idx in order:
        res, entry = results[idx], entries[idx]
        if res.state != want:
            continue
        try:
            out = _patch_texts(entry.file_patches, work, reverse=not forward)
        except PatchConflict as exc:
            what = "the patch does not apply" if forward else "patched hash matches but the patch does not reverse"
            res.state, res.message = CONFLICT, f"{what}: {exc}"
            return
        pin = "patched_sha256" if forward else "pristine_sha256"
        for rel, data in out.items():
            got = fsio.sha256_bytes(data)
            if got != entry.files[rel][pin]:
                res.state = CONFLICT
                res.message = (
                    f"{rel}: patch result has sha256 {got}, series.json expects {entry.files[rel][pin]} (broken series)"
                )
                return
        if forward:
            failed = [c for c in _checks(entry, {**work, **out}) if not c.ok]
            if failed:  # checked on the result before anything is written
                res.state = CONFLICT
                res.message = "the patched text would fail: " + "; ".join(
                    f"{c.description} (found {c.found})" for c in failed
                )
                return
        work.update(out)
        if forward:
            res.forward = {rel: work[rel] for rel in out}
        else:
            res.reverse = {rel: work[rel] for rel in out}


def _analyze_record(entry: series.Entry, root: Path, release: str, sset: series.SeriesSet) -> EntryResult:
    """A fixed-upstream / not-needed entry: nothing to write; check the file really is in that state."""
    res = EntryResult(entry.id, entry.fix, entry.state, CONFLICT, "")
    current: dict[str, bytes] = {}
    notes: list[str] = []
    for rel, hashes in entry.files.items():
        data = _read(root, rel)
        actual = fsio.sha256_bytes(data) if data is not None else None
        res.files[rel] = {"before": actual, "pristine_sha256": hashes["pristine_sha256"]}
        if data is None:
            res.message = f"{rel}: file missing (vLLM {release} ships it)"
            return res
        current[rel] = data
        if actual != hashes["pristine_sha256"]:
            notes.append(
                f"{rel} differs from the released file (expected sha256 {hashes['pristine_sha256']}, found {actual})"
            )
    for kind, ref in entry.evidence.items():
        fps = series.load_patch_ref(sset, ref)
        fwd = all(fp.path in current and unidiff.applies(_decode(current[fp.path], fp.path), fp) for fp in fps)
        rev = all(
            fp.path in current and unidiff.applies(_decode(current[fp.path], fp.path), fp.reversed()) for fp in fps
        )
        res.evidence[f"{ref} reverse-applies"] = rev
        res.evidence[f"{ref} applies"] = fwd
        if kind == "reverse_applies" and rev:
            notes.append(f"{ref} reverse-applies")
        elif kind == "applies_in_neither_direction" and not fwd and not rev:
            notes.append(f"{ref} applies in neither direction")
    res.postconditions = _checks(entry, current)
    failed = [c for c in res.postconditions if not c.ok]
    if failed:
        res.message = "expected upstream state not found: " + "; ".join(
            f"{c.description} (found {c.found})" for c in failed
        )
        return res
    what = "fixed upstream" if entry.state == FIXED_UPSTREAM else "not needed"
    detail = entry.upstream or ""
    res.state = entry.state
    res.message = f"{what}: {detail}" + (f" ({'; '.join(notes)})" if notes else "")
    return res


def _short(value: str) -> str:
    return value.rsplit(".", 1)[-1]


def _analyze_unknown(fix: series.Fix, target: Target, sset: series.SeriesSet) -> EntryResult:
    """A release the series does not know: classify by what the file declares, never patch."""
    v = target.version
    res = EntryResult(f"{fix.id} (content)", fix.id, "content", CONFLICT, "")
    data = _read(target.root, fix.file)
    res.files[fix.file] = {"before": fsio.sha256_bytes(data) if data is not None else None}
    res.state = UNKNOWN  # until the file says otherwise: "cannot tell" is not a conflict, but not a pass either
    if data is None:
        res.state = NOT_NEEDED
        res.message = f"unknown release {v}: {fix.file} is absent -> no AITER FA backend here, nothing to apply"
        return res
    try:
        found = pysource.declared_support(_decode(data, fix.file), fix.file, fix.cls, fix.attributes)
    except (SyntaxError, PatchConflict) as exc:
        res.message = f"unknown release {v}: {fix.file} cannot be read as Python ({exc}); cannot tell"
        return res
    if found is None:
        res.message = f"unknown release {v}: no class {fix.cls} in {fix.file}; cannot tell whether the fix is needed"
        return res
    attr, value = found
    if value == pysource.INHERITED:
        res.message = (
            f"unknown release {v}: {fix.cls} sets none of {fix.attributes} and inherits from a base class the series"
            " does not read; cannot tell whether the fix is needed"
        )
        return res
    rule = fix.content_states.get(value)
    res.postconditions = [
        pysource.CheckResult(
            f"{fix.cls}.{attr or '<CUDA-graph support>'}", rule is not None and rule["state"] in OK_STATES, value
        )
    ]
    if rule is None:
        res.message = f"unknown release {v}: file declares {attr} = {value}, which the series does not know"
        return res
    res.state = rule["state"]
    declares = "nothing" if value == pysource.NOT_DECLARED else _short(value)
    res.message = f"unknown release {v}: file declares {declares} -> {rule['why']}"
    same = [
        rs.id
        for rs in sset.releases.values()
        for e in rs.entries
        if e.files.get(fix.file, {}).get("pristine_sha256") == res.files[fix.file]["before"]
    ]
    if same:
        res.message += f" (the file is byte-identical to the pristine file of {', '.join(same)})"
    return res


def content_matches(sset: series.SeriesSet, root: Path) -> list[str]:
    """The release whose files the target's are byte-identical to (`0.10.2 pristine` / `0.10.2 patched`).

    The second opinion on the release, next to the metadata: it names the release a file really comes from when
    the metadata lies or is missing. A release counts only when every file its series pins matches (a file two
    releases share, e.g. an unchanged kv_cache.py, says nothing alone): all released files (`pristine`), or
    all files as the whole series leaves them (`patched`).
    """
    hashes: dict[str, str | None] = {}

    def actual(rel: str) -> str | None:
        if rel not in hashes:
            hashes[rel] = fsio.sha256_file(root / rel)
        return hashes[rel]

    out: list[str] = []
    for rel_id, rs in sorted(sset.releases.items(), key=lambda kv: _release_key(kv[0])):
        chains = series.file_chains(rs.entries)
        records = {f: h["pristine_sha256"] for e in rs.entries if e.state != "patch" for f, h in e.files.items()}
        if not chains and not records:
            continue
        if all(actual(f) == h for f, h in records.items()):
            if chains and all(actual(f) == c[0] for f, c in chains.items()) or not chains:
                out.append(f"{rel_id} pristine")
            elif chains and all(actual(f) == c[-1] for f, c in chains.items()):
                out.append(f"{rel_id} patched")
    return out


def _release_key(release: str) -> list[int]:
    return [int(x) for x in release.split(".") if x.isdigit()]


def status_summary(rep: Report) -> str:
    """One line that names what is wrong in the words of the states: conflict only for a real conflict."""
    states = {e.state for e in rep.entries}
    if rep.exit_code == EXIT_OK:
        return "ok"
    parts = []
    if CONFLICT in states:
        parts.append("conflicts found: the files are not what the series expects")
    if AFFECTED in states:
        parts.append("affected: this release has the bug and the series has no patch for it")
    if UNKNOWN in states:
        parts.append("cannot tell from the files whether the fix is needed")
    return "; ".join(parts) or "failed"


def analyze(sset: series.SeriesSet, target: Target, command: str) -> Report:
    rs, why = sset.find(target.release) if target.is_final_release else (None, "")
    rep = Report(
        command,
        target,
        sset.root,
        rs.id if rs else None,
        sset.series_sha256(rs.release) if rs else sset.sha256,
        known=rs is not None,
        series_why=why,
    )
    if rs is None:
        log.info(
            "vLLM %s is not a release the series knows (%s); classifying by file content",
            target.version,
            ", ".join(sorted([*sset.releases, *(c for r in sset.releases.values() for c in r.covers)])),
        )
        rep.entries = [_analyze_unknown(fix, target, sset) for fix in sset.fixes.values() if fix.classifies_content]
    else:
        patches = _analyze_patches(rs.entries, target.root, rs.release)
        for idx, entry in enumerate(rs.entries):
            if entry.state == "patch":
                rep.entries.append(patches[idx])
            else:
                rep.entries.append(_analyze_record(entry, target.root, rs.release, sset))
    rep.content_matches = content_matches(sset, target.root)
    bad = [e for e in rep.entries if e.state not in OK_STATES]
    other = [m for m in rep.content_matches if rs is None or not m.startswith(rs.release + " ")]
    for e in bad if other else []:
        if "sha256 mismatch" in e.message or "expected upstream state not found" in e.message:
            e.message += f" (the files are those of vLLM {', '.join(other)}: wrong release?)"
    rep.exit_code = EXIT_FAILED if bad else EXIT_OK
    return rep


def _record_path(target: Target) -> Path | None:
    if target.dist_info is None:
        return None
    p = target.dist_info / "RECORD"
    return p if p.is_file() else None


def _write(target: Target, contents: dict[str, bytes], rep: Report) -> None:
    """Write every changed file plus the RECORD in one all-or-nothing step."""
    writer = fsio.AtomicWriter()
    try:
        for rel, data in contents.items():
            writer.stage(target.root / rel, data)
        record = _record_path(target)
        if record is not None:
            new_record, missing = fsio.updated_record(record.read_text(encoding="utf-8"), contents)
            for rel in missing:
                rep.record_notes.append(f"{record.name} has no line for {rel}; left as is")
            if new_record != record.read_text(encoding="utf-8"):
                writer.stage(record, new_record.encode("utf-8"))
                rep.record_notes.append(f"updated {record.parent.name}/RECORD for {', '.join(sorted(contents))}")
        else:
            rep.record_notes.append("no dist-info RECORD found; nothing to keep consistent")
    except BaseException:
        writer.abort()
        raise
    writer.commit()


def _write_or_report(target: Target, contents: dict[str, bytes], rep: Report) -> bool:
    """`_write`, but a refused write (read-only file, full disk) becomes a failed report, not a traceback."""
    try:
        _write(target, contents, rep)
    except WriteError as exc:
        rep.exit_code = EXIT_FAILED
        rep.summary = f"refused: {exc}"
        _fill_after(rep, target)
        return False
    return True


def _fill_after(rep: Report, target: Target) -> None:
    for e in rep.entries:
        for rel, info in e.files.items():
            info["after"] = fsio.sha256_file(target.root / rel)


def _analyze_for_change(
    sset: series.SeriesSet, target: Target, command: str, state: str
) -> tuple[Report, list[EntryResult] | None]:
    """One refusal rule for apply and revert: if any entry is not OK, write nothing (todo None) but still hash files."""
    rep = analyze(sset, target, command)
    if rep.exit_code != EXIT_OK:
        _fill_after(rep, target)
        rep.summary = "refused: " + "; ".join(e.message for e in rep.entries if e.state not in OK_STATES)
        return rep, None
    return rep, [e for e in rep.entries if e.state == state]


def apply(sset: series.SeriesSet, target: Target, dry_run: bool = False) -> Report:
    rep, todo = _analyze_for_change(sset, target, "apply", APPLICABLE)
    if todo is None:
        return rep
    contents: dict[str, bytes] = {}
    for e in todo:  # in series order: a stacked patch's text already contains the ones before it
        contents.update(e.forward)
    if not todo:
        rep.summary = "nothing to do: " + "; ".join(f"{e.id}: {e.state.replace('-', ' ')}" for e in rep.entries)
    elif dry_run:
        for e in todo:
            e.action = "would-apply"
        rep.summary = f"dry run: would apply {len(todo)} patch(es); nothing written"
    else:
        if not _write_or_report(target, contents, rep):
            return rep
        for e in todo:
            e.action, e.state, e.message = "applied", APPLIED, "applied now"
            e.postconditions = _checks(e.spec, e.forward) if e.spec else e.postconditions
        rep.changed = True
        rep.summary = f"applied {len(todo)} patch(es)"
    _fill_after(rep, target)
    return rep


def revert(sset: series.SeriesSet, target: Target) -> Report:
    rep, todo = _analyze_for_change(sset, target, "revert", APPLIED)
    if todo is None:
        return rep
    contents: dict[str, bytes] = {}
    for e in reversed(todo):  # reverse series order: the earliest patch's reverse text is the released file
        contents.update(e.reverse)
    if todo:
        if not _write_or_report(target, contents, rep):
            return rep
        for e in todo:
            e.action, e.state, e.message = "reverted", APPLICABLE, "reverted to the released file"
            e.postconditions = _checks(e.spec, e.reverse) if e.spec else e.postconditions
        rep.changed = True
        rep.summary = f"reverted {len(todo)} patch(es)"
    else:
        rep.summary = "nothing to revert: " + "; ".join(f"{e.id}: {e.state.replace('-', ' ')}" for e in rep.entries)
    _fill_after(rep, target)
    return rep


def verify(sset: series.SeriesSet, target: Target) -> Report:
    """Post-conditions hold on disk: patches applied (and RECORD consistent), upstream states as recorded."""
    rep = analyze(sset, target, "verify")
    failures: list[str] = []
    record = _record_path(target)
    record_text = record.read_text(encoding="utf-8") if record else ""
    for e in rep.entries:
        if e.state == APPLICABLE:
            failures.append(f"{e.id}: not applied (run `apply`)")
        elif e.state not in OK_STATES:
            failures.append(f"{e.id}: {e.message}")
        failures.extend(
            f"{e.id}: post-condition failed: {c.description} (found {c.found})" for c in e.postconditions if not c.ok
        )
        if e.kind == "patch" and e.state == APPLIED and record_text:
            for rel in e.files:
                entry = fsio.record_entry(record_text, rel)
                data = (target.root / rel).read_bytes()
                if entry is not None and entry != (fsio.record_hash(data), str(len(data))):
                    failures.append(
                        f"{e.id}: RECORD line for {rel} says {entry[0]} but the file is {fsio.record_hash(data)}"
                    )
    _fill_after(rep, target)
    rep.exit_code = EXIT_FAILED if failures else EXIT_OK
    rep.summary = (
        "verify failed: " + "; ".join(dict.fromkeys(failures)) if failures else "verified: every post-condition holds"
    )
    return rep
