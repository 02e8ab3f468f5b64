"""The ONNX file of a pair student (`heatc.learn.students.pair_student`): writing it, and reading it back
as a torch model.

The export (`export_pair_onnx`, dynamo, not optimised so that every weight keeps its name)
takes `input_ids`, `attention_mask` (int64 `[batch, length]`) and `value_positions` (int64
`[batch, probes]`, token positions) and gives `scores` (`[batch, length]`) and `coupling`
(`[batch, probes, length]`, log coupling up to a constant per row); the model's configuration
is in the metadata (`heatc.student`), so `load_pair_student` rebuilds the torch model from the
file alone — what `heatc finetune` starts from. A token-only student written by an earlier
heatc (optimised export, no metadata) is read too: its encoder and token head, the pair head
starting untrained.

Public surface: `export_pair_onnx`, `load_pair_student`, `without_trace`, `METADATA_KEY`.
"""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import torch

from heatc.errors import Diagnostic, HeatError
from heatc.learn.students.pair_student import PairConfig, PairExample, PairStudent, collate
from heatc.learn.students.student import quiet_exporter

if TYPE_CHECKING:
    import onnx

METADATA_KEY = "heatc.student"
FORMAT = 1  # the metadata's format; a student of another format is read as a legacy one or refused


def export_pair_onnx(model: PairStudent, path: Path, *, check_examples: list[PairExample] | None = None) -> float:
    """Export with the dynamo exporter (dynamic batch, length and probes; not optimised, so
    weights keep their names) with the configuration in the metadata; returns the largest
    absolute difference between onnxruntime and torch, both outputs, on `check_examples`."""
    import onnx
    import onnxruntime

    model = model.eval()
    ids = torch.randint(0, model.config.vocab_size, (2, 16))
    attn = torch.ones_like(ids)
    positions = torch.tensor([[1, 3], [2, 5]])
    batch = torch.export.Dim("batch")
    length = torch.export.Dim("length", max=model.config.max_length)
    probes = torch.export.Dim("probes", max=model.config.max_length)
    tmp = path.with_name(path.name + ".tmp")
    with quiet_exporter():
        program = torch.onnx.export(
            model, (ids, attn, positions), dynamo=True, optimize=False, verbose=False,
            input_names=["input_ids", "attention_mask", "value_positions"],
            output_names=["scores", "coupling"],
            dynamic_shapes={"input_ids": {0: batch, 1: length}, "attention_mask": {0: batch, 1: length},
                            "value_positions": {0: batch, 1: probes}},
        )  # fmt: skip
    program.save(str(tmp))
    proto = without_trace(onnx.load(str(tmp)))
    entry = proto.metadata_props.add()
    entry.key, entry.value = METADATA_KEY, json.dumps({"format": FORMAT, "config": asdict(model.config)})
    onnx.save(proto, str(tmp))
    tmp.replace(path)
    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    worst = 0.0
    for b0 in range(0, len(check_examples or []), 32):
        part = collate(check_examples[b0 : b0 + 32], model.config.max_length)  # type: ignore[index]
        with torch.no_grad():
            ref = [x.numpy() for x in model(part.ids, part.attn, part.positions)]
        got = session.run(
            None,
            {
                "input_ids": part.ids.numpy(),
                "attention_mask": part.attn.numpy(),
                "value_positions": part.positions.numpy(),
            },
        )
        worst = max(worst, *(float(np.abs(g - r).max()) for g, r in zip(got, ref, strict=True)))
    return worst


def without_trace(proto: onnx.ModelProto) -> onnx.ModelProto:
    """The exported model without the exporter's record of how each node came to be (per node
    and value: the FX node, module scopes and the Python stack trace, with absolute source
    paths): it tells onnxruntime nothing, and with it the file's bytes depend on where heatc
    was installed — the same student learned in two checkouts would differ."""
    nodes = list(proto.graph.node)
    while nodes:
        node = nodes.pop()
        del node.metadata_props[:]
        for attribute in node.attribute:
            for graph in ([attribute.g] if attribute.HasField("g") else []) + list(attribute.graphs):
                nodes.extend(graph.node)
    for value in [*proto.graph.input, *proto.graph.output, *proto.graph.value_info]:
        del value.metadata_props[:]
    return proto


def load_pair_student(path: Path) -> tuple[PairStudent, str]:
    """The torch model of an exported student, and what it holds: "pair" (both heads) or
    "token" (a token-only student of an earlier heatc: the pair head is untrained)."""
    import onnx
    from onnx import numpy_helper

    try:
        proto = onnx.load(str(path))
    except FileNotFoundError:
        raise HeatError(Diagnostic(str(path), 0, 0, "no such file")) from None
    except Exception as e:  # onnx raises DecodeError and others for a damaged file
        raise HeatError(Diagnostic(str(path), 0, 0, f"not a student detector (cannot read it as ONNX: {e})")) from None
    inits = {i.name: numpy_helper.to_array(i) for i in proto.graph.initializer}
    meta = {p.key: p.value for p in proto.metadata_props}
    if METADATA_KEY in meta:
        info = json.loads(meta[METADATA_KEY])
        if info.get("format") != FORMAT:
            raise HeatError(Diagnostic(str(path), 0, 0, f"student format {info.get('format')} is not supported"))
        # a student of an earlier heatc names no positions: it has absolute ones
        config = PairConfig(**{"positions": "absolute", **info["config"]})
        model = PairStudent(config)
        state = model.state_dict()
        missing = [k for k in state if k not in inits]
        if missing:
            raise HeatError(Diagnostic(str(path), 0, 0, f"damaged student: no weights for {', '.join(missing[:3])}"))
        model.load_state_dict({k: torch.from_numpy(np.array(inits[k])).to(state[k].dtype) for k in state})
        return model.eval(), "pair"
    config, state = _legacy_state(path, inits)
    with torch.random.fork_rng():  # the untrained pair head: the same for every load, whatever ran before
        torch.manual_seed(0)
        model = PairStudent(config)
    model.load_state_dict(state, strict=False)
    return model.eval(), "token"


def _legacy_state(path: Path, inits: dict[str, np.ndarray]) -> tuple[PairConfig, dict]:
    """A token student exported by an earlier heatc (the optimised exporter renames and
    transposes weights): export a token student of the same shape whose every weight is
    distinct random numbers, and match its initialisers to its weights to learn where each
    weight went."""
    import tempfile

    import onnx
    from onnx import numpy_helper

    from heatc.learn.students import student as st

    tables = [a for a in inits.values() if a.ndim == 2 and a.dtype == np.float16]
    norm = inits.get("norm.weight")
    if len(tables) != 1 or norm is None:
        raise HeatError(Diagnostic(str(path), 0, 0, "not a student detector heatc wrote (no feature table)"))
    layers = len({k.split(".")[1] for k in inits if k.startswith("blocks.")})
    vocab, features = tables[0].shape
    token = st.StudentConfig(vocab_size=vocab, width=int(norm.shape[0]), layers=layers, features=features)
    reference = st.Student(token).eval()
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for tensor in reference.state_dict().values():
            tensor.copy_(torch.rand(tensor.shape, generator=gen).to(tensor.dtype))
    with tempfile.TemporaryDirectory() as tmp:
        st.export_onnx(reference, Path(tmp) / "reference.onnx")
        ref = {i.name: numpy_helper.to_array(i) for i in onnx.load(str(Path(tmp) / "reference.onnx")).graph.initializer}
    ref_state = {k: v.numpy() for k, v in reference.state_dict().items()}
    state: dict[str, torch.Tensor] = {}
    for name, arr in ref.items():
        if name not in inits or arr.ndim == 0 or arr.size < 2:
            continue
        for k, want in ref_state.items():
            if k in state:
                continue
            if want.shape == arr.shape and np.array_equal(want, arr):
                state[k] = torch.from_numpy(np.array(inits[name]))
            elif want.ndim == 2 and want.T.shape == arr.shape and np.array_equal(want.T, arr):
                state[k] = torch.from_numpy(np.array(inits[name]).T.copy())
            else:
                continue
            break
    missing = [k for k in ref_state if k not in state and ref_state[k].size >= 2]
    if missing:
        raise HeatError(
            Diagnostic(str(path), 0, 0, f"a student this heatc cannot read (no weights for {', '.join(missing[:3])})")
        )
    for k in ref_state:  # one-element weights (the token head's bias) keep their names
        if k not in state and k in inits:
            state[k] = torch.from_numpy(np.array(inits[k]).reshape(ref_state[k].shape))
    config = PairConfig(
        vocab_size=vocab, width=token.width, layers=layers, heads=token.heads, features=features, positions="absolute"
    )
    return config, {k: v.to(torch.float16 if k == "embed.table" else torch.float32) for k, v in state.items()}
