#!/usr/bin/env python3
"""Judges `leasehold verify --history-dir DIR` records on its own and compares with each cell's verdict.

This checker shares no code with leasehold or its lab: it reads the JSON Lines files the lab wrote
(one per cell: a `cell` line with the lab's verdict, then `write`, `interval`, `refused`, `stall`
and `fault` lines), recomputes every judgement from the writes and the intervals alone, and exits 1
when any judgement differs from the one the lab recorded, or when the record contradicts itself.

What it judges, per cell:

* the workload's invariant, from the accepted writes: lost updates (counter: a write whose new
  value is not its old value + 1), oversold units (inventory: not old - 1, or below 0), duplicate
  orders and double-applied messages (a second accepted write of one item), illegal transitions
  (an (old, new) state pair outside created->paid->shipped->delivered);
* mutual exclusion, from the holders' intervals: pairs of intervals of two different holders that
  share a moment (one ending exactly when the next starts does not);
* fence order, from the accepted writes in acceptance order: a write whose fence is lower than one
  accepted before it; where the resource checks the fence (`fenced`), any is a broken promise;
* whether a strategy documented as safe broke its promise: a violation, a stalled lock wait, a lock
  the lab saw held with no expiry (taken from the lab: the record has no view of the lock's key),
  or, where fenced, a fence that went backwards.

And whether the record holds together: acceptance order strictly increasing; for the workloads
that update one row (counter, inventory, transitions) each write's old value is the new value of
the write of the same item before it (a write removed from the record breaks this chain); each
write of a strategy with a lock lies inside an interval of its writer holding the same fence
(within --slack-ms, for the database's clock and the worker's rounding to a millisecond apart);
every interval ends no earlier than it starts.

Limit: the intervals are the holders' own account, so "mutual exclusion" here is what the holders
believed, checked against when the resource accepted their writes; the checker cannot see a lock.

Usage: check_history.py [--slack-ms N] [--quiet] DIR_OR_FILE...
Exit: 0 every verdict agrees, 1 a disagreement or a record at odds with itself, 2 unreadable input.
"""

import argparse
import json
import os
import sys

LEGAL = {("created", "paid"), ("paid", "shipped"), ("shipped", "delivered")}
CHAINED = {"counter", "inventory", "transitions"}
KINDS = {"cell", "write", "interval", "refused", "stall", "fault"}
NEEDS = {
    "cell": ("index", "workload", "fault", "strategy", "status", "locks", "fenced",
             "safe_by_design", "verdict"),
    "write": ("seq", "at_ms", "item", "old", "new", "writer", "fence"),
    "interval": ("slot", "start_ms", "end_ms", "fence"),
    "refused": ("at_ms", "slot", "fence"),
    "stall": ("slot", "start_ms", "end_ms"),
    "fault": ("slot", "start_ms", "end_ms"),
}
VERDICT = ("violations", "overlapping_holders", "fence_regressions", "stalls",
           "lock_without_expiry", "accepted_writes", "failed")


class Unreadable(Exception):
    """The input is not a record this checker understands (exit 2)."""


def read_record(path):
    """The cell line and the other lines of one file, grouped by kind."""
    cell, lines = None, {k: [] for k in KINDS}
    with open(path, encoding="utf-8") as f:
        for n, text in enumerate(f, 1):
            if not text.strip():
                continue
            try:
                obj = json.loads(text)
            except json.JSONDecodeError as e:
                raise Unreadable(f"{path}:{n}: not JSON ({e.msg})") from None
            kind = obj.get("record") if isinstance(obj, dict) else None
            if kind not in KINDS:
                raise Unreadable(f"{path}:{n}: `record` is {kind!r}, not one of {sorted(KINDS)}")
            missing = [k for k in NEEDS[kind] if k not in obj]
            if missing:
                raise Unreadable(f"{path}:{n}: a `{kind}` line without {', '.join(missing)}")
            if kind == "cell":
                if cell is not None or n != 1:
                    raise Unreadable(f"{path}:{n}: the `cell` line must be the first and only one")
                missing = [k for k in VERDICT if k not in obj["verdict"]]
                if missing:
                    raise Unreadable(f"{path}:{n}: the verdict has no {', '.join(missing)}")
                cell = obj
            else:
                lines[kind].append(obj)
    if cell is None:
        raise Unreadable(f"{path}: no `cell` line (is this a --history-dir file?)")
    return cell, lines


def num(v):
    try:
        return int(v)
    except (TypeError, ValueError):
        return None


def violations(workload, writes):
    """Writes that break the workload's invariant, counted."""
    if workload == "counter":
        return sum(1 for w in writes if num(w["old"]) is None or num(w["new"]) != num(w["old"]) + 1)
    if workload == "inventory":
        bad = 0
        for w in writes:
            old, new = num(w["old"]), num(w["new"])
            if old is None or new != old - 1 or (new is not None and new < 0):
                bad += 1
        return bad
    if workload in ("orders", "messages"):
        seen, bad = set(), 0
        for w in writes:
            if w["item"] in seen:
                bad += 1
            seen.add(w["item"])
        return bad
    if workload == "transitions":
        return sum(1 for w in writes if (w["old"], w["new"]) not in LEGAL)
    raise Unreadable(f"unknown workload {workload!r}")


def overlapping_pairs(intervals):
    """Pairs of intervals of different holders that share a moment."""
    pairs = 0
    ordered = sorted(intervals, key=lambda i: i["start_ms"])
    for a_i, a in enumerate(ordered):
        for b in ordered[a_i + 1:]:
            if b["start_ms"] >= a["end_ms"]:
                break
            if b["slot"] != a["slot"]:
                pairs += 1
    return pairs


def fence_regressions(writes):
    """Accepted writes whose fence is lower than one accepted before them."""
    highest, back = None, 0
    for w in writes:
        if highest is not None and w["fence"] < highest:
            back += 1
        highest = w["fence"] if highest is None else max(highest, w["fence"])
    return back


def inconsistencies(cell, lines, slack):
    """Ways the record contradicts itself (a write removed, a writer or fence changed...)."""
    out, writes = [], lines["write"]
    for a, b in zip(writes, writes[1:]):
        if b["seq"] <= a["seq"]:
            out.append(f"write seq {b['seq']} follows seq {a['seq']}: not in acceptance order")
    if cell["workload"] in CHAINED:
        last = {}
        for w in writes:
            prev = last.get(w["item"])
            if prev is not None and w["old"] != prev["new"]:
                out.append(f"write seq {w['seq']} found {w['item']!r} at {w['old']!r} but seq "
                           f"{prev['seq']} had left it at {prev['new']!r}: a write is missing "
                           f"or was changed")
            last[w["item"]] = w
    for i in lines["interval"]:
        if i["end_ms"] < i["start_ms"]:
            out.append(f"holder {i['slot']}'s interval ends ({i['end_ms']}) before it starts")
    if cell["locks"]:
        by_slot = {}
        for i in lines["interval"]:
            by_slot.setdefault(i["slot"], []).append(i)
        for w in writes:
            inside = any(i["fence"] == w["fence"]
                         and i["start_ms"] - slack <= w["at_ms"] <= i["end_ms"] + slack
                         for i in by_slot.get(w["writer"], []))
            if not inside:
                out.append(f"write seq {w['seq']} by holder {w['writer']} with fence {w['fence']}"
                           f" at {w['at_ms']} lies in no interval of that holder with that fence")
    return out


def judge(cell, lines):
    """The checker's own verdict, in the lab's terms."""
    writes, fenced = lines["write"], cell["fenced"]
    own = {
        "accepted_writes": len(writes),
        "stalls": len(lines["stall"]),
        "lock_without_expiry": cell["verdict"]["lock_without_expiry"],
    }
    if cell["status"] != "ran":
        own.update(violations=None, overlapping_holders=None, fence_regressions=None,
                   failed=False, accepted_writes=0, stalls=0)
        return own
    own["violations"] = violations(cell["workload"], writes)
    own["overlapping_holders"] = overlapping_pairs(lines["interval"]) if cell["locks"] else None
    # The lab judges fence order where the strategy's writes carry a lease's fence; writes that
    # all carry 0 have none to judge.
    bearing = cell["verdict"]["fence_regressions"] is not None or any(w["fence"] for w in writes)
    own["fence_regressions"] = fence_regressions(writes) if bearing else None
    broken = (own["violations"] > 0 or own["stalls"] > 0 or own["lock_without_expiry"]
              or (fenced and (own["fence_regressions"] or 0) > 0))
    own["failed"] = bool(cell["safe_by_design"] and broken)
    return own


def check(path, slack):
    """Disagreements and inconsistencies of one file, and its counts."""
    cell, lines = read_record(path)
    own = judge(cell, lines)
    problems = []
    if not cell["locks"] and lines["interval"]:
        problems.append("holder intervals recorded for a strategy without a lock")
    for key in VERDICT:
        lab = cell["verdict"][key]
        if lab != own[key]:
            problems.append(f"{key}: the lab recorded {json.dumps(lab)}, the checker finds "
                            f"{json.dumps(own[key])}")
    if cell["status"] == "ran":
        problems += inconsistencies(cell, lines, slack)
    elif any(lines[k] for k in KINDS if k != "cell"):
        problems.append(f"a cell that did not run ({cell['status']}) has writes or intervals")
    counts = {k: len(lines[k]) for k in ("write", "interval", "refused", "stall", "fault")}
    return cell, problems, counts


def files_of(paths):
    out = []
    for p in paths:
        if os.path.isdir(p):
            out += sorted(os.path.join(p, f) for f in os.listdir(p) if f.endswith(".jsonl"))
        elif os.path.isfile(p):
            out.append(p)
        else:
            raise Unreadable(f"{p}: no such file or directory")
    if not out:
        raise Unreadable(f"no .jsonl files in {' '.join(paths)} (written by leasehold verify "
                         f"--history-dir DIR)")
    return out


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("paths", nargs="+", metavar="DIR_OR_FILE")
    ap.add_argument("--slack-ms", type=int, default=1,
                    help="how far a write's time (the database's clock) may lie outside its "
                         "holder's interval (the worker's clock), in ms (default 1)")
    ap.add_argument("--quiet", action="store_true", help="print only disagreements and the total")
    args = ap.parse_args(argv)
    try:
        files = files_of(args.paths)
        total = {"cells": 0, "ran": 0, "write": 0, "interval": 0, "refused": 0, "stall": 0,
                 "fault": 0, "violations": 0, "failed": 0}
        bad = 0
        for path in files:
            cell, problems, counts = check(path, args.slack_ms)
            name = f"{cell['workload']} x {cell['fault']} x {cell['strategy']}"
            total["cells"] += 1
            total["ran"] += cell["status"] == "ran"
            total["violations"] += cell["verdict"]["violations"] or 0
            total["failed"] += bool(cell["verdict"]["failed"])
            for k, v in counts.items():
                total[k] += v
            if problems:
                bad += 1
                for p in problems:
                    print(f"DISAGREE {os.path.basename(path)} ({name}): {p}")
            elif not args.quiet:
                print(f"agree    {os.path.basename(path)} ({name})")
    except Unreadable as e:
        print(f"check_history: {e}", file=sys.stderr)
        return 2
    except OSError as e:
        print(f"check_history: cannot read {e.filename}: {e.strerror}", file=sys.stderr)
        return 2
    summary = (f"{total['cells']} cells ({total['ran']} ran): {total['write']} accepted writes, "
               f"{total['interval']} holder intervals, {total['refused']} stale writes refused, "
               f"{total['stall']} stalled waits, {total['fault']} fault windows; "
               f"{total['violations']} violations and {total['failed']} failed cells as recorded")
    if bad:
        print(f"{summary}; {bad} cell(s) DISAGREE with the checker")
        return 1
    print(f"{summary}; every verdict agrees with the checker")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
