"""Find external-data references in a serialized ONNX model without the onnx package (the runtime is torch- and
onnx-free).

An ONNX tensor can say "my bytes are in another file" (`data_location = EXTERNAL`, `external_data` entries);
onnxruntime then reads that file relative to the working directory or the model's folder, outside any checksum.
This walks the protobuf wire format just deeply enough to find such tensors: graph initializers, sparse
initializers, tensor-valued node attributes, subgraphs (If/Loop/Scan bodies), functions (with their attribute defaults) and
training-info graphs.
"""

from __future__ import annotations

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
