"""Collectives of a compiled XLA program, counted per step from its optimized HLO text.

Why: the plan must say what a TPU slice will send over ICI and DCN before it is rented, and
the one place that knows is the program libtpu compiled (``compiled.as_text()``). A
collective inside the scanned layer stack runs once per layer, so every instruction is
weighted by how often its computation runs (the trip counts of the ``while`` loops around it,
read from each loop's condition). ``cost_analysis()`` does not do that, which is why FLOPs
are estimated another way (see ``plan.py``).

Bytes are per chip and per execution, the collective's full buffer: the gathered result of an
all-gather, the input of an all-reduce or reduce-scatter, the buffer moved by an all-to-all or
collective-permute. XLA's TPU backend writes a reduce-scatter as an all-reduce inside an
``all-reduce-scatter`` fusion; those are counted as reduce-scatters.
"""

import collections
import math
import re

import numpy as np

KINDS = ("all-gather", "all-reduce", "reduce-scatter", "all-to-all", "collective-permute")
_BYTES = {"pred": 1, "s8": 1, "u8": 1, "s16": 2, "u16": 2, "f16": 2, "bf16": 2, "s32": 4}
_BYTES.update({"u32": 4, "f32": 4, "s64": 8, "u64": 8, "f64": 8, "c64": 8, "c128": 16})
_ARRAY = re.compile(r"\b([a-z]+[0-9]*(?:e[0-9]m[0-9][a-z]*)?)\[([0-9,]*)\]")
_HEADER = re.compile(r"^(?:ENTRY )?%(\S+) \(")
_INSTR = re.compile(r"^\s+(?:ROOT )?%(\S+) = (.*?)\s([a-z][a-z0-9-]*)\((.*)$")
_CALLS = re.compile(
    r"\b(body|condition|calls|to_apply|branch_computations)=\{?([^,}\s]+(?:, ?%[^,}\s]+)*)"
)


def _array_bytes(text: str, skip_scalars=False) -> int:
    total = 0
    for dtype, dims in _ARRAY.findall(text):
        size = math.prod(int(d) for d in dims.split(",") if d) if dims else 1
        if skip_scalars and not dims:
            continue
        total += size * _BYTES.get(dtype, 1 if dtype.startswith("f8") else 0)
    return total


def parse(hlo: str):
    """{computation: [(name, shape text, opcode, rest of line)]} and the entry's name."""
    comps, entry, current = {}, None, None
    for line in hlo.splitlines():
        head = _HEADER.match(line)
        if head and line.rstrip().endswith("{"):
            current = head[1]
            comps[current] = []
            entry = current if line.startswith("ENTRY") else entry
            continue
        m = _INSTR.match(line)
        if m and current is not None:
            comps[current].append(m.groups())
    return comps, entry


def _trip_count(instrs) -> int:
    """A scan's condition compares the counter with one integer constant: the trip count."""
    consts = [
        int(c)
        for _, shape, op, rest in instrs
        if op == "constant" and shape.startswith(("s32", "s64", "u32"))
        for c in re.findall(r"^(-?\d+)\)", rest)
    ]
    return max(consts) if len(consts) == 1 and consts[0] > 0 else 1


def multipliers(comps, entry) -> dict:
    """How many times each computation runs per execution of the entry computation."""
    mult = collections.defaultdict(int)

    def visit(name, times):
        mult[name] += times
        for *_, rest in comps.get(name, ()):
            calls = dict((k, v) for k, v in _CALLS.findall(rest))
            trips = _trip_count(comps.get(calls.get("condition", "").lstrip("%"), ()))
            for key, value in calls.items():
                for callee in re.findall(r"%?([^,\s%]+)", value):
                    if callee in comps and key != "to_apply":
                        visit(callee, times * (trips if key == "body" else 1))

    visit(entry, 1)
    return mult


def trip_counts(hlo: str) -> list:
    """The trip count of every ``while`` loop left in the program (XLA may unroll short ones)."""
    comps, _ = parse(hlo)
    counts = []
    for instrs in comps.values():
        for *_, op, rest in instrs:
            cond = re.search(r"condition=%([^,\s]+)", rest)
            if op == "while" and cond:
                counts.append(_trip_count(comps.get(cond[1], ())))
    return counts


def replica_groups(rest: str, num_devices: int):
    """Device groups (lists of logical ids) of one collective, or None when not given."""
    m = re.search(r"replica_groups=mesh\[([^\]]*)\] \{([^}]*)\}", rest)
    if m:
        axes = re.findall(r"'([^']+)'=(\d+)", m[1])
        names, sizes = [a for a, _ in axes], [int(s) for _, s in axes]
        reduced = [names.index(a) for a in re.findall(r"'([^']+)'", m[2])]
        ids = np.arange(math.prod(sizes)).reshape(sizes)
        keep = [i for i in range(len(sizes)) if i not in reduced]
        size = math.prod(sizes[i] for i in reduced)
        return ids.transpose(keep + reduced).reshape(-1, size).tolist()
    m = re.search(r"replica_groups=\[([\d,]+)\]<=\[([\d,]+)\](?:T\(([\d,]+)\))?", rest)
    if m:
        shape = [int(x) for x in m[1].split(",")]
        ids = np.arange(num_devices).reshape([int(x) for x in m[2].split(",")])
        if m[3]:
            ids = ids.transpose([int(x) for x in m[3].split(",")])
        return ids.reshape(shape).tolist()
    m = re.search(r"replica_groups=\{(\{[\d,]*\}(?:,\{[\d,]*\})*)\}", rest)
    if m:
        return [[int(x) for x in g.split(",") if x] for g in re.findall(r"\{([\d,]*)\}", m[1])]
    m = re.search(r"source_target_pairs=\{(\{[\d,]*\}(?:,\{[\d,]*\})*)\}", rest)
    if m:
        return [[int(x) for x in g.split(",")] for g in re.findall(r"\{([\d,]*)\}", m[1])]
    return None


def _dcn_kind(op: str, rest: str):
    """Multi-slice programs hand what crosses slices to the megascale runtime as a ``send``
    tagged with the collective it is part of; the slice's own collectives stay in ICI."""
    m = re.search(r'_xla_megascale_transfer_type="([A-Z_]+)"', rest)
    return m[1].lower().replace("_", "-") if op == "send" and m else None


def _op_name(rest: str, instrs_by_name: dict) -> str:
    where = re.search(r'op_name="([^"]*)"', rest)
    if where:
        return where[1]
    operand = re.match(r"%([^,)\s]+)", rest)  # a send names no op: take its operand's
    source = instrs_by_name.get(operand[1], "") if operand else ""
    where = re.search(r'op_name="([^"]*)"', source)
    return where[1] if where else ""


def collectives(hlo: str, slice_of=None) -> dict:
    """Per collective kind: ``count`` and ``bytes`` per step, ``in_loop`` (instructions inside a
    loop), ``cross_slice_bytes`` (what goes over DCN: the megascale transfers of a multi-slice
    program, and any group spanning slices given ``slice_of``, logical device id -> slice) and
    ``ops``, each instruction with its bytes, executions and op_name."""
    comps, entry = parse(hlo)
    mult = multipliers(comps, entry)
    out = {k: dict(count=0, bytes=0, in_loop=0, cross_slice_bytes=0, ops=[]) for k in KINDS}
    for comp, instrs in comps.items():
        times = mult.get(comp, 0)
        by_name = {name: rest for name, _, _, rest in instrs}
        for _, shape, op, rest in instrs:
            dcn = _dcn_kind(op, rest)
            kind = dcn or op.removesuffix("-start")
            if kind not in KINDS or times == 0:
                continue
            if kind == "all-reduce" and comp.startswith("all-reduce-scatter"):
                kind = "reduce-scatter"
            size = _array_bytes(shape, skip_scalars=op.endswith("-start") or bool(dcn))
            size = size // 2 if op.endswith("-start") else size  # (operand, result) pairs
            groups = replica_groups(rest, len(slice_of) if slice_of else 0)
            cross = bool(dcn) or (
                slice_of is not None
                and groups is not None
                and any(len({slice_of[i] for i in g}) > 1 for g in groups)
            )
            entry_ = out[kind]
            entry_["count"] += times
            entry_["bytes"] += times * size
            entry_["in_loop"] += times > 1
            entry_["cross_slice_bytes"] += times * size if cross else 0
            entry_["ops"].append(
                dict(bytes=size, times=times, cross_slice=cross, op=_op_name(rest, by_name))
            )
    return out
