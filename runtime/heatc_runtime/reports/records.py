"""Decoding a module's event and snapshot records (docs/abi.md, "Records") into report
objects, with the tables each needs from the manifest (rule, capture, class, channel and
anchor group names).

Public surface: `RecordDecoder(manifest, event_size, snapshot_size)`.
"""

from __future__ import annotations

import struct

from ..abi import EVENT, EVENT_ANCHOR, SNAPSHOT
from ..errors import ModuleError
from .report import Conflict, Event, Snapshot, Verdict, VerdictMap

_VERDICTS = tuple(Verdict)  # by value: indexing is cheaper than calling the enum


class RecordDecoder:
    """A module's record layouts and names. Reads only fixed tables, never module memory:
    safe to use without the checker's lock, and kept by a report whose events are decoded
    when first read."""

    def __init__(self, manifest: dict, event_size: int, snapshot_size: int):
        m = manifest
        self.event_size, self.snapshot_size = event_size, snapshot_size
        self.rule_names = [r["name"] for r in m["rules"]]
        self.rule_index = {name: i for i, name in enumerate(self.rule_names)}
        self._captures = [[(c["name"], c["kind"]) for c in r["captures"]] for r in m["rules"]]
        # the capture names of rules that capture numbers only: their values need no decoding
        # (the event record's fields unpack as floats), the common case on the hot path of a scan
        self._number_names = [
            tuple(name for name, _ in caps) if all(kind == "number" for _, kind in caps) else None
            for caps in self._captures
        ]
        self._requirements = [r["requirements"] for r in m["rules"]]
        self._classes = m["classes"]
        # per rule and capture: its name, and the class names its value indexes (None: a number)
        self._capture_decoders = [
            tuple((name, self._classes if kind == "class" else None) for name, kind in caps) for caps in self._captures
        ]
        self._channels = [(c["name"], c["kind"]) for c in m["channels"]]
        self._groups = m["anchor_groups"]
        # the ABI's event record (seq, kind, verdict, pad, rule or group, failed, start, end,
        # conflict, pad, its value, start and end; the positions below read it in this order,
        # tests/test_abi.py checks them), then one float per capture
        self.event_record = struct.Struct(EVENT.struct.format + "d" * ((self.event_size - EVENT.size) // 8))
        # a snapshot record: its head, then the verdict bytes (padded) as one bytes field
        self.snap_record = struct.Struct(SNAPSHOT.struct.format + f"{self.snapshot_size - SNAPSHOT.size}s")
        assert self.event_record.size == self.event_size

    def _value(self, kind: str, x: float) -> float | str:
        return self._classes[int(x)] if kind == "class" else float(x)

    def value(self, kind: str, x: float) -> float | str:
        return self._classes[int(x)] if kind == "class" else float(x)

    def events(self, raw) -> list[tuple[int, Event]]:
        """[(seq, event)] of a run of event records. Reads only the module's fixed tables, not
        its memory: safe without the lock."""
        # struct over the whole run: numpy's tolist() costs twice as much, and reading record
        # fields one by one microseconds per event
        return [(rec[0], self.event(rec)) for rec in self.event_record.iter_unpack(raw)]

    @staticmethod
    def _malformed(rec: tuple, why: Exception) -> ModuleError:
        # (a module heatc compiled never writes one: this one was changed after the build)
        fields = "seq, kind, verdict, pad, rule or group, failed, start, end, conflict"
        return ModuleError(f"the module wrote a malformed event record ({fields}: {rec[:9]}): "
                           f"{type(why).__name__}: {why}")  # fmt: skip

    def scan_events(self, runs: list[bytes]) -> list[Event]:
        """The events of a scan's runs of records. The common event (a match whose captures
        are all numbers, no failed requirement, no conflict) is built here inline: a method
        call per event was a quarter of the decoding."""
        new, set_dict, event_type = object.__new__, object.__setattr__, Event
        rules, number_names, verdicts, general = self.rule_names, self._number_names, _VERDICTS, self.event
        out: list[Event] = []
        add = out.append
        rec: tuple = ()
        try:
            for raw in runs:
                for rec in self.event_record.iter_unpack(raw):
                    r = rec[4]
                    # (an anchor event's index is its group's, which may be past the last rule)
                    if rec[1] or rec[5] != -1 or rec[8] != -1 or (names := number_names[r]) is None:
                        add(general(rec))
                        continue
                    event = new(event_type)
                    set_dict(event, "__dict__", {
                        "kind": "match", "name": rules[r], "start": rec[6], "end": rec[7], "verdict": verdicts[rec[2]],
                        "captures": ((names[0], rec[13]),) if len(names) == 1 else tuple(zip(names, rec[13:])),  # noqa: B905
                        "failed": None, "conflict": None,
                    })  # fmt: skip
                    add(event)
        except (IndexError, KeyError, ValueError, TypeError) as e:  # (a record out of the tables)
            raise self._malformed(rec, e) from None
        return out

    def event(self, rec: tuple) -> Event:
        """One event record, as a tuple in the order of `event_record`'s fields. A record no
        heatc module writes (an index out of its table) raises ModuleError."""
        try:
            if rec[5] < -1 or rec[8] < -1:  # (-1: none; Python would read -2 as the second last)
                raise IndexError("a negative index")
            return self._event(rec)
        except (IndexError, KeyError, ValueError, TypeError, OverflowError) as e:
            raise self._malformed(rec, e) from None

    def _event(self, rec: tuple) -> Event:
        _seq, kind, verdict, _pad, r, failed, start, end, conflict, _pad2, cvalue, cstart, cend = rec[:13]
        caps = rec[13:]  # room for the most captures of any rule
        if kind == EVENT_ANCHOR:
            return Event("anchor", self._groups[r], start, end)
        names = self._number_names[r]
        if names is not None:
            # (zip's strict= keyword alone doubles the cost of this line)
            captures = ((names[0], caps[0]),) if len(names) == 1 else tuple(zip(names, caps))  # noqa: B905
        else:
            decoders = zip(self._capture_decoders[r], caps)  # noqa: B905  (caps has room for the most of any rule)
            captures = tuple([(name, x if classes is None else classes[int(x)]) for (name, classes), x in decoders])
        failed_text = self._requirements[r][failed] if failed >= 0 else None
        clash = None
        if conflict >= 0:
            name, k = self._channels[conflict]
            clash = Conflict(name, self.value(k, cvalue), cstart, cend)
        return Event._match(self.rule_names[r], start, end, _VERDICTS[verdict], captures, failed_text, clash)

    def snapshots(self, raw) -> list[tuple[int, int, Snapshot]]:
        """[(seq, n_events, snapshot)] of a run of snapshot records."""
        snaps: list[tuple[int, int, Snapshot]] = []
        # struct over the whole buffer: a decoding step drains a few snapshots, and numpy's
        # per-field views cost more than the records themselves
        index = self.rule_index
        for (
            seq,
            n_events,
            final,
            _,
            n_bytes,
            lexemes,
            tokens,
            matches,
            rejections,
            codes,
        ) in self.snap_record.iter_unpack(raw):
            counters = {
                "bytes": n_bytes,
                "lexemes": lexemes,
                "tokens": tokens,
                "matches": matches,
                "rejections": rejections,
            }  # fmt: skip  (a literal: dict(zip(...)) costs more than the rest of the record)
            # (the codes are padded past the last rule: VerdictMap reads them by rule index)
            snaps.append((seq, n_events, Snapshot(VerdictMap(index, codes), [], counters, bool(final))))
        return snaps
