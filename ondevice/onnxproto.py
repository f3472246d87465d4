"""Find external-data references in a serialized ONNX model without the onnx package (the runtime is torch- and
onnx-free).

An ONNX tensor can say "my bytes are in another file" (`data_location = EXTERNAL`, `external_data` entries);
onnxruntime then reads that file relative to the working directory or the model's folder, outside any checksum.
This walks the protobuf wire format just deeply enough to find such tensors: graph initializers, sparse
initializers, tensor-valued node attributes, subgraphs (If/Loop/Scan bodies), functions (with their attribute defaults) and
training-info graphs.
"""

from __future__ import annotations

import numpy as np

from ondevice.errors import OndeviceError

# field number -> message type of the length-delimited fields we descend into (onnx.proto3 numbering)
_SCHEMA: dict[str, dict[int, str]] = {
    "model": {7: "graph", 20: "training", 25: "function"},
    "training": {1: "graph", 2: "graph"},  # TrainingInfoProto: initialization and algorithm graphs
    "graph": {1: "node", 5: "tensor", 15: "sparse"},
    "function": {7: "node", 11: "attribute"},  # 11: attribute defaults, which may hold tensors
    "node": {5: "attribute"},
    "attribute": {5: "tensor", 6: "graph", 10: "tensor", 11: "graph", 22: "sparse", 23: "sparse"},
    "sparse": {1: "tensor", 2: "tensor"},
    "tensor": {},
}
_TENSOR_NAME, _TENSOR_EXTERNAL_DATA, _TENSOR_DATA_LOCATION = 8, 13, 14
_MAX_DEPTH = 64


class MalformedModel(ValueError):
    """The bytes are not a well-formed protobuf message."""


def _varint(buf: memoryview, pos: int) -> tuple[int, int]:
    value, shift = 0, 0
    while True:
        if pos >= len(buf) or shift > 63:
            raise MalformedModel("truncated varint")
        byte = buf[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, pos
        shift += 7


def _fields(buf: memoryview):
    """(field number, wire type, value) of one message; length-delimited values as memoryview slices."""
    pos = 0
    while pos < len(buf):
        key, pos = _varint(buf, pos)
        field, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = _varint(buf, pos)
        elif wire == 1:
            value, pos = None, pos + 8
        elif wire == 5:
            value, pos = None, pos + 4
        elif wire == 2:
            size, pos = _varint(buf, pos)
            value, pos = buf[pos : pos + size], pos + size
        else:  # groups (3, 4) are not used by ONNX
            raise MalformedModel(f"unsupported wire type {wire}")
        if pos > len(buf) or field == 0:
            raise MalformedModel("field runs past the end of its message")
        yield field, wire, value


def _walk(buf: memoryview, kind: str, depth: int, found: list[str]) -> None:
    if depth > _MAX_DEPTH:
        raise MalformedModel("graphs nested too deeply")
    name, external = "", False
    for field, wire, value in _fields(buf):
        if kind == "tensor":
            if field == _TENSOR_NAME and wire == 2:
                name = bytes(value).decode("utf-8", "replace")
            elif field == _TENSOR_EXTERNAL_DATA and wire == 2 or field == _TENSOR_DATA_LOCATION and wire == 0 and value != 0:
                external = True
        elif wire == 2 and field in _SCHEMA[kind]:
            _walk(value, _SCHEMA[kind][field], depth + 1, found)
    if external:
        found.append(name or "(unnamed tensor)")


_NODE_OP_TYPE, _NODE_DOMAIN = 4, 7


def _walk_nodes(buf: memoryview, kind: str, depth: int, found: set[tuple[str, str]]) -> None:
    if depth > _MAX_DEPTH:
        raise MalformedModel("graphs nested too deeply")
    op, domain = None, ""
    for field, wire, value in _fields(buf):
        if kind == "node" and wire == 2 and field == _NODE_OP_TYPE:
            op = bytes(value).decode("utf-8", "replace")
        elif kind == "node" and wire == 2 and field == _NODE_DOMAIN:
            domain = bytes(value).decode("utf-8", "replace")
        if wire == 2 and field in _SCHEMA[kind] and _SCHEMA[kind][field] != "tensor":
            _walk_nodes(value, _SCHEMA[kind][field], depth + 1, found)
    if kind == "node":
        found.add(("" if domain == "ai.onnx" else domain, op or ""))


def operators(model: bytes) -> set[tuple[str, str]]:
    """Every (domain, op_type) a serialized ONNX model uses, in its graph, subgraphs (If/Loop/Scan bodies), functions
    and training graphs; the default domain is "" (also when written "ai.onnx")."""
    found: set[tuple[str, str]] = set()
    try:
        _walk_nodes(memoryview(model), "model", 0, found)
    except MalformedModel as exc:
        raise OndeviceError(f"malformed protobuf: {exc}") from None
    return found


# The operators ondevice's exporters emit (collected from the encoder graphs of every pooling in fp32 and int8, the
# DSE and DiPair heads and the shipped pretrained bundle), plus the few another torch version emits for the same
# layers. Control flow (Loop, Scan, If), random, string and sequence operators are never emitted: a graph that uses
# one is not ours, and a Loop of 10^12 trips would run before any check could stop it.
EXPORTED_OPS: dict[str, frozenset[str]] = {
    "": frozenset({
        "Abs", "Add", "And", "Cast", "Clip", "Concat", "Constant", "ConstantOfShape", "DequantizeLinear", "Div",
        "DynamicQuantizeLinear", "Equal", "Expand", "Flatten", "Gather", "GatherND", "Gemm", "Greater",
        "GreaterOrEqual", "Identity", "LSTM", "LayerNormalization", "Less", "LessOrEqual", "MatMul", "MatMulInteger",
        "Max", "Min", "Mul", "Neg", "Not", "Or", "Pad", "QuantizeLinear", "Range", "ReduceMax", "ReduceMean",
        "ReduceSum", "Relu", "Reshape", "Round", "Shape", "Sigmoid", "Slice", "Softmax", "Split", "Sqrt", "Squeeze",
        "Sub", "Tanh", "Transpose", "Unsqueeze", "Where",
    }),
    "com.microsoft": frozenset({"DynamicQuantizeLSTM", "DynamicQuantizeMatMul"}),
}


def foreign_operators(model: bytes) -> list[str]:
    """The operators of `model` that ondevice's exporters never emit ("domain:op", sorted; empty for our graphs)."""
    return sorted(f"{d}:{op}" if d else op for d, op in operators(model) if op not in EXPORTED_OPS.get(d, ()))


def external_tensors(model: bytes) -> list[str]:
    """Names of the tensors in `model` whose data lives in another file (empty for a self-contained model)."""
    found: list[str] = []
    try:
        _walk(memoryview(model), "model", 0, found)
    except MalformedModel as exc:
        raise OndeviceError(f"malformed protobuf: {exc}") from None
    return found


# -- sizes of the tensors a graph allocates from shapes it computes ------------------------------------------------
# An operator of the allowed set can still allocate without bound: ConstantOfShape, Expand, Range and Pad take their
# output size from a tensor the graph computes (a constant of 10^12, or Shape(ids) times 10^9). `allocation_problem`
# evaluates those size tensors for a few input sizes (every symbolic input dimension 1, each one alone large, all
# large) wherever they follow from constants and input shapes alone, and refuses a graph whose allocation outgrows
# ALLOC_PER_INPUT elements per element of its largest input: an encoder's own tensors hold a few hidden widths per
# token. Sizes that depend on tensor values are not known before a run; the memory cap of the session bounds those
# (ondevice.ort_session).
ALLOC_PER_INPUT = 1 << 20
_PROBE_DIM = 64  # the "large" value of a symbolic dimension: growth faster than linear shows against 1
_GRAPH_NODE, _GRAPH_INITIALIZER, _GRAPH_INPUT = 1, 5, 11
_NODE_INPUT, _NODE_OUTPUT, _NODE_ATTRIBUTE = 1, 2, 5
_ATTR_NAME, _ATTR_F, _ATTR_I, _ATTR_T, _ATTR_INTS = 1, 2, 3, 5, 8
_T_DIMS, _T_TYPE, _T_FLOATS, _T_INT32S, _T_INT64S, _T_NAME, _T_RAW, _T_DOUBLES = 1, 2, 4, 5, 7, 8, 9, 10
_INT_TYPES = {6: "<i4", 7: "<i8", 2: "u1", 3: "i1", 4: "<u2", 5: "<i2", 12: "<u4", 13: "<u8", 9: "u1"}
_FLOAT_TYPES = {1: "<f4", 11: "<f8"}
_MAX_CONST = 1 << 16  # elements of a constant worth evaluating (shape and index constants are tiny)


def _submessage(buf: memoryview, field_no: int) -> memoryview | None:
    for field, wire, value in _fields(buf):
        if field == field_no and wire == 2:
            return value
    return None


def _packed_varints(value: memoryview) -> list[int]:
    out, pos = [], 0
    while pos < len(value):
        v, pos = _varint(value, pos)
        out.append(v)
    return out


def _signed(v: int) -> int:
    return v - (1 << 64) if v >= 1 << 63 else v


def _count(dims: list[int]) -> int:
    """Elements of a tensor of `dims` (-1 when a dimension is negative)."""
    count = 1
    for d in dims:
        if d < 0:
            return -1
        count *= d
    return count


def _tensor(buf: memoryview):
    """(name, numpy value) of a small TensorProto, or (name, None) when it is large or of another type."""
    name, dims, dtype, raw, ints, floats = "", [], 0, None, [], None
    for field, wire, value in _fields(buf):
        if field in (_T_RAW, _T_INT64S, _T_INT32S, _T_FLOATS, _T_DOUBLES) and not 0 <= _count(dims) <= _MAX_CONST:
            continue  # a weight, not a shape: its data is never decoded (dims come first in what writers emit)
        if field == _T_NAME and wire == 2:
            name = bytes(value).decode("utf-8", "replace")
        elif field == _T_DIMS:
            dims += [_signed(value)] if wire == 0 else [_signed(v) for v in _packed_varints(value)]
        elif field == _T_TYPE and wire == 0:
            dtype = value
        elif field == _T_RAW and wire == 2:
            raw = value
        elif field in (_T_INT64S, _T_INT32S):
            ints += [_signed(value)] if wire == 0 else [_signed(v) for v in _packed_varints(value)]
        elif field in (_T_FLOATS, _T_DOUBLES) and wire == 2:
            floats = (value, "<f4" if field == _T_FLOATS else "<f8")
    count = _count(dims)
    if not 0 <= count <= _MAX_CONST:
        return name, None
    try:
        if raw is not None:
            kind = _INT_TYPES.get(dtype) or _FLOAT_TYPES.get(dtype)
            if kind is None:
                return name, None
            arr = np.frombuffer(bytes(raw[: count * np.dtype(kind).itemsize]), kind)
        elif dtype in _INT_TYPES:
            arr = np.array(ints, dtype=np.int64)
        elif dtype in _FLOAT_TYPES and floats is not None:
            arr = np.frombuffer(bytes(floats[0][: count * 8]), floats[1])[:count].astype(np.float64)
        else:
            return name, None
        if arr.size != count:
            return name, None
        arr = arr.reshape(dims)
    except ValueError:
        return name, None
    return name, (arr.astype(object) if arr.dtype.kind in "iub" else arr.astype(np.float64))


def _input_dims(buf: memoryview) -> tuple[str, list[int | str]]:
    """(name, dims) of a graph input's ValueInfoProto: an int for a fixed dimension, a name for a symbolic one."""
    name, dims = "", []
    for field, wire, value in _fields(buf):
        if field == 1 and wire == 2:
            name = bytes(value).decode("utf-8", "replace")
        elif field == 2 and wire == 2:
            tensor = _submessage(value, 1)
            shape = _submessage(tensor, 2) if tensor is not None else None
            if shape is None:
                continue
            for f, w, dim in _fields(shape):
                if f != 1 or w != 2:
                    continue
                fixed, param = None, None
                for df, dw, dv in _fields(dim):
                    if df == 1 and dw == 0:
                        fixed = _signed(dv)
                    elif df == 2 and dw == 2:
                        param = bytes(dv).decode("utf-8", "replace")
                dims.append(fixed if fixed is not None and fixed > 0 else (param or f"{name}:{len(dims)}"))
    return name, dims


def _nodes(graph: memoryview) -> list[tuple[str, list[str], list[str], dict]]:
    """(op_type, inputs, outputs, attributes) of a graph's nodes, in order; attributes hold ints, floats, tensors."""
    out = []
    for field, wire, value in _fields(graph):
        if field != _GRAPH_NODE or wire != 2:
            continue
        op, ins, outs, attrs = "", [], [], {}
        for f, w, v in _fields(value):
            if f == _NODE_INPUT and w == 2:
                ins.append(bytes(v).decode("utf-8", "replace"))
            elif f == _NODE_OUTPUT and w == 2:
                outs.append(bytes(v).decode("utf-8", "replace"))
            elif f == _NODE_OP_TYPE and w == 2:
                op = bytes(v).decode("utf-8", "replace")
            elif f == _NODE_ATTRIBUTE and w == 2:
                aname, aval, ints = "", None, []
                for af, aw, av in _fields(v):
                    if af == _ATTR_NAME and aw == 2:
                        aname = bytes(av).decode("utf-8", "replace")
                    elif af == _ATTR_I and aw == 0:
                        aval = _signed(av)
                    elif af == _ATTR_F and aw == 5:
                        aval = None  # floats of attributes are not needed for sizes
                    elif af == _ATTR_T and aw == 2:
                        aval = _tensor(av)[1]
                    elif af == _ATTR_INTS:
                        ints += [_signed(av)] if aw == 0 else [_signed(x) for x in _packed_varints(av)]
                attrs[aname] = ints if ints else aval
        out.append((op, ins, outs, attrs))
    return out


def _eval(op: str, ins: list, attrs: dict):
    """The value of one node of integer/shape arithmetic on known inputs (numpy), or None when not evaluated."""
    a = ins[0] if ins else None
    if op in ("Identity", "Cast"):
        to = attrs.get("to")
        if op == "Cast" and to in _FLOAT_TYPES:
            return np.asarray(a, np.float64)
        if op == "Cast" and to in _INT_TYPES:
            return np.asarray(np.trunc(np.asarray(a, np.float64)) if np.asarray(a).dtype.kind == "f" else a).astype(object)
        return a if op == "Identity" else None
    if op in ("Add", "Sub", "Mul", "Div", "Max", "Min") and len(ins) >= 2:
        fn = {"Add": np.add, "Sub": np.subtract, "Mul": np.multiply, "Max": np.maximum, "Min": np.minimum}.get(op)
        if fn is not None:
            out = ins[0]
            for x in ins[1:]:
                out = fn(out, x)
            return out
        b = ins[1]
        if np.any(np.asarray(b == 0)):
            return None
        return a // b if a.dtype == object and b.dtype == object else a / b
    if op == "Neg":
        return -a
    if op == "Abs":
        return abs(a)
    if op == "Concat":
        return np.concatenate([np.atleast_1d(x) for x in ins], axis=attrs.get("axis", 0))
    if op == "Unsqueeze":
        axes = ins[1] if len(ins) > 1 else attrs.get("axes")
        out = a
        for ax in sorted(int(x) for x in np.atleast_1d(axes)):
            out = np.expand_dims(out, ax if ax >= 0 else ax + out.ndim + 1)
        return out
    if op == "Squeeze":
        axes = ins[1] if len(ins) > 1 else attrs.get("axes")
        return np.squeeze(a) if axes is None else np.squeeze(a, tuple(int(x) for x in np.atleast_1d(axes)))
    if op == "Reshape":
        shape = [int(x) for x in ins[1]]
        shape = [a.shape[i] if s == 0 else s for i, s in enumerate(shape)]
        return a.reshape(shape)
    if op == "Gather":
        return np.take(a, np.asarray(ins[1], np.int64), axis=attrs.get("axis", 0))
    if op == "Slice" and len(ins) >= 3:
        starts, ends = [int(x) for x in ins[1]], [int(x) for x in ins[2]]
        axes = [int(x) for x in ins[3]] if len(ins) > 3 and ins[3] is not None else list(range(len(starts)))
        steps = [int(x) for x in ins[4]] if len(ins) > 4 and ins[4] is not None else [1] * len(starts)
        index = [slice(None)] * a.ndim
        for s, e, ax, st in zip(starts, ends, axes, steps):
            index[ax] = slice(s, e, st)
        return a[tuple(index)]
    if op in ("Equal", "Greater", "Less", "GreaterOrEqual", "LessOrEqual"):
        fn = {"Equal": np.equal, "Greater": np.greater, "Less": np.less, "GreaterOrEqual": np.greater_equal,
              "LessOrEqual": np.less_equal}[op]
        return fn(ins[0], ins[1]).astype(object)
    if op == "Where" and len(ins) == 3:
        return np.where(np.asarray(ins[0], bool), ins[1], ins[2])
    if op == "Constant":
        return attrs.get("value")
    return None


def _size_of(op: str, ins: list, known: list[bool]) -> float | None:
    """Elements the node allocates by its size inputs when they are known (None when they are not)."""
    if op == "ConstantOfShape" and known[0]:
        return float(np.prod([max(float(x), 1.0) for x in np.atleast_1d(ins[0])]))
    if op == "Expand" and len(known) > 1 and known[1]:
        return float(np.prod([max(abs(float(x)), 1.0) for x in np.atleast_1d(ins[1])]))
    if op == "Range" and len(known) == 3 and all(known):
        start, limit, delta = (float(np.asarray(x).reshape(-1)[0]) for x in ins)
        if delta == 0:
            return float("inf")
        return max(float(np.ceil((limit - start) / delta)), 0.0)
    if op == "Pad" and len(known) > 1 and known[1]:
        return max([abs(float(x)) for x in np.atleast_1d(ins[1])] + [0.0])
    return None


_SIZED = ("ConstantOfShape", "Expand", "Range", "Pad")


def allocation_problem(model: bytes) -> str | None:
    """Why `model` would allocate out of proportion to its inputs (None when it would not, as far as the shapes it
    computes from constants and input sizes tell): an operator of `_SIZED` whose output, for some input size,
    exceeds ALLOC_PER_INPUT elements per element of the largest input."""
    try:
        graph = _submessage(memoryview(model), 7)
        if graph is None:
            return None
        nodes = _nodes(graph)
        if not any(op in _SIZED for op, *_ in nodes):
            return None
        consts: dict[str, object] = {}
        inputs: dict[str, list[int | str]] = {}
        for field, wire, value in _fields(graph):
            if field == _GRAPH_INITIALIZER and wire == 2:
                name, arr = _tensor(value)
                if arr is not None:
                    consts[name] = arr
            elif field == _GRAPH_INPUT and wire == 2:
                name, dims = _input_dims(value)
                inputs[name] = dims
    except MalformedModel as exc:
        raise OndeviceError(f"malformed protobuf: {exc}") from None
    symbols = sorted({d for dims in inputs.values() for d in dims if isinstance(d, str)})
    points = [dict.fromkeys(symbols, 1)] + [{**dict.fromkeys(symbols, 1), s: _PROBE_DIM} for s in symbols]
    if len(symbols) > 1:
        points.append(dict.fromkeys(symbols, _PROBE_DIM))
    first: dict[int, float] = {}  # each sized node's allocation when every symbolic dimension is 1
    for point in points:
        shapes = {name: [point[d] if isinstance(d, str) else d for d in dims] for name, dims in inputs.items()}
        unit = max([float(np.prod(s)) if s else 1.0 for s in shapes.values()] + [1.0])
        values: dict[str, object] = dict(consts)
        for at, (op, ins, outs, attrs) in enumerate(nodes):
            args = [values.get(x) if x else None for x in ins]
            known = [a is not None for a in args]
            if op in _SIZED:
                size = _size_of(op, args, known)
                dims = ", ".join(f"{s} = {v}" for s, v in point.items()) or "any input"
                if size is not None and not size <= ALLOC_PER_INPUT * unit:
                    return (f"its {op} operator allocates {size:,.0f} elements for inputs of {dims} (more than "
                            f"{ALLOC_PER_INPUT:,} per input element)")
                if size is not None and at in first and size > 2 * max(first[at], 1.0) * unit:
                    return (f"its {op} operator allocates {size:,.0f} elements for inputs of {dims}, growing faster "
                            "than its inputs")
                if size is not None and point is points[0]:
                    first[at] = size
            result = None
            if op == "Shape" and ins and ins[0] in shapes and ins[0] not in values:
                dims = shapes[ins[0]]
                start, end = attrs.get("start"), attrs.get("end")
                result = np.array(dims[slice(start, end)], dtype=object)
            elif op == "Constant" or (any(ins) and all(values.get(x) is not None for x in ins if x)):
                try:
                    with np.errstate(all="ignore"):
                        result = _eval(op, [a for a in args], attrs)
                except (ValueError, TypeError, IndexError, ZeroDivisionError, OverflowError, AttributeError):
                    result = None
            if result is not None and outs:
                result = np.asarray(result)
                if result.size <= _MAX_CONST:
                    values[outs[0]] = result
    return None
