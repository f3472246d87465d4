"""The protobuf walker of ondevice.onnxproto: the shape arithmetic `allocation_problem` evaluates (each op against
numpy), tensors it decodes or leaves alone, and small graphs built with the onnx helper API that it refuses or
accepts."""

from __future__ import annotations

import numpy as np
import pytest

from ondevice.errors import OndeviceError
from ondevice.onnxproto import (
    ALLOC_PER_INPUT,
    _eval,
    _input_dims,
    _size_of,
    _tensor,
    allocation_problem,
    external_tensors,
    operators,
)

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper


def _i(*values) -> np.ndarray:
    """An integer tensor as allocation_problem holds one (object dtype: Python ints never overflow)."""
    return np.array(values, dtype=object)


# ------------------------------------------------------------------------------------------- _eval against numpy


RNG = np.random.default_rng(0)
CASES = [RNG.integers(-9, 10, size=s) for s in [(3,), (2, 3), (1, 4, 1), (2, 1, 3)]]


@pytest.mark.parametrize("x", CASES, ids=lambda x: str(x.shape))
def test_unary_ops_match_numpy(x):
    a = x.astype(object)
    assert np.array_equal(_eval("Neg", [a], {}).astype(np.int64), -x)
    assert np.array_equal(_eval("Abs", [a], {}).astype(np.int64), np.abs(x))
    assert _eval("Identity", [a], {}) is a


@pytest.mark.parametrize("x", CASES, ids=lambda x: str(x.shape))
def test_squeeze_with_and_without_axes_matches_numpy(x):
    a = x.astype(object)
    assert _eval("Squeeze", [a], {}).shape == np.squeeze(x).shape
    ones = [i for i, d in enumerate(x.shape) if d == 1]
    if ones:
        axes = _i(*ones)
        assert _eval("Squeeze", [a, axes], {}).shape == np.squeeze(x, tuple(ones)).shape
        assert _eval("Squeeze", [a], {"axes": ones}).shape == np.squeeze(x, tuple(ones)).shape


def test_unsqueeze_sorts_axes_and_counts_negative_ones_from_the_end():
    a = _i(1, 2, 3)
    assert _eval("Unsqueeze", [a, _i(0)], {}).shape == (1, 3)
    assert _eval("Unsqueeze", [a, _i(2, 0)], {}).shape == (1, 3, 1)  # axes of the output, applied in order
    assert _eval("Unsqueeze", [a], {"axes": [-1]}).shape == (3, 1)
    assert _eval("Unsqueeze", [a, _i(-1, 0)], {}).shape == (1, 3, 1)


def test_reshape_keeps_a_dimension_given_as_zero_and_infers_minus_one():
    x = np.arange(24).reshape(2, 3, 4)
    a = x.astype(object)
    assert _eval("Reshape", [a, _i(0, -1)], {}).shape == (2, 12)
    assert _eval("Reshape", [a, _i(0, 0, 2, 2)], {}).shape == (2, 3, 2, 2)
    assert np.array_equal(_eval("Reshape", [a, _i(-1)], {}).astype(np.int64), x.reshape(-1))


def test_gather_matches_numpy_take_on_each_axis():
    x = np.arange(12).reshape(3, 4)
    a = x.astype(object)
    assert np.array_equal(_eval("Gather", [a, _i(2, 0)], {}).astype(np.int64), np.take(x, [2, 0], axis=0))
    assert np.array_equal(_eval("Gather", [a, _i(-1)], {"axis": 1}).astype(np.int64), np.take(x, [-1], axis=1))
    assert _eval("Gather", [_i(5, 7, 9), np.array(1, dtype=object)], {}) == 7  # a scalar index: a scalar


@pytest.mark.parametrize("starts, ends, axes, steps", [
    ([1], [3], None, None),
    ([0, 1], [2, 4], None, None),
    ([1], [4], [1], None),
    ([4], [-6], [1], [-2]),
    ([0, 3], [3, 0], [1, 0], [2, -1]),
])
def test_slice_with_axes_and_steps_matches_numpy(starts, ends, axes, steps):
    x = np.arange(20).reshape(4, 5)
    ins = [x.astype(object), _i(*starts), _i(*ends)]
    index = [slice(None)] * 2
    for k, (s, e) in enumerate(zip(starts, ends)):
        index[axes[k] if axes else k] = slice(s, e, steps[k] if steps else 1)
    if axes or steps:
        ins.append(_i(*axes) if axes else None)
    if steps:
        ins.append(_i(*steps))
    assert np.array_equal(_eval("Slice", ins, {}).astype(np.int64), x[tuple(index)])


@pytest.mark.parametrize("op, fn", [("Equal", np.equal), ("Greater", np.greater), ("Less", np.less),
                                    ("GreaterOrEqual", np.greater_equal), ("LessOrEqual", np.less_equal)])
def test_comparisons_match_numpy(op, fn):
    x, y = RNG.integers(-3, 4, size=(2, 5)), RNG.integers(-3, 4, size=(5,))
    got = _eval(op, [x.astype(object), y.astype(object)], {})
    assert got.dtype == object and np.array_equal(got.astype(bool), fn(x, y))


def test_where_picks_by_condition_and_needs_three_inputs():
    cond = np.array([True, False, True], dtype=object)
    assert list(_eval("Where", [cond, _i(1, 2, 3), _i(10, 20, 30)], {})) == [1, 20, 3]
    assert _eval("Where", [cond, _i(1, 2, 3)], {}) is None


def test_arithmetic_is_elementwise_and_variadic_max_min_fold_every_input():
    a, b, c = _i(6, -4, 9), _i(2, 5, 3), _i(7, 0, 1)
    assert list(_eval("Add", [a, b], {})) == [8, 1, 12]
    assert list(_eval("Sub", [a, b], {})) == [4, -9, 6]
    assert list(_eval("Mul", [a, b], {})) == [12, -20, 27]
    assert list(_eval("Max", [a, b, c], {})) == [7, 5, 9]
    assert list(_eval("Min", [a, b, c], {})) == [2, -4, 1]
    assert _eval("Add", [a], {}) is None  # a binary op with one input is not evaluated


def test_div_of_integers_is_integral_of_floats_is_true_division_and_by_zero_is_unknown():
    assert list(_eval("Div", [_i(7, 9), _i(2, 3)], {})) == [3, 3]
    got = _eval("Div", [np.array([1.0, 3.0]), np.array([2.0, 4.0])], {})
    assert np.allclose(got, [0.5, 0.75])
    assert _eval("Div", [_i(7, 9), _i(2, 0)], {}) is None
    assert _eval("Div", [np.array([1.0]), np.array([0.0])], {}) is None


def test_cast_to_float_to_int_and_to_other_types():
    f = _eval("Cast", [_i(3, -2)], {"to": TensorProto.FLOAT})
    assert f.dtype == np.float64 and list(f) == [3.0, -2.0]
    n = _eval("Cast", [np.array([2.7, -2.7, 0.2])], {"to": TensorProto.INT64})
    assert n.dtype == object and list(n) == [2, -2, 0]  # truncated toward zero, as onnxruntime casts
    assert list(_eval("Cast", [_i(5)], {"to": TensorProto.INT32})) == [5]
    assert _eval("Cast", [_i(5)], {"to": TensorProto.STRING}) is None


def test_constant_concat_and_unknown_ops():
    value = _i(4, 5)
    assert _eval("Constant", [], {"value": value}) is value
    assert _eval("Constant", [], {}) is None
    assert list(_eval("Concat", [_i(1), np.array(2, dtype=object), _i(3, 4)], {})) == [1, 2, 3, 4]
    assert _eval("Sqrt", [_i(4)], {}) is None


# ----------------------------------------------------------------------------------------------------- _size_of


def test_sizes_of_the_allocating_ops():
    assert _size_of("ConstantOfShape", [_i(3, 0, 4)], [True]) == 12  # a zero dimension still counts as one
    assert _size_of("ConstantOfShape", [None], [False]) is None
    assert _size_of("Expand", [None, _i(-1, 5)], [False, True]) == 5
    assert _size_of("Expand", [None, None], [False, False]) is None
    assert _size_of("Range", [_i(0), _i(10), _i(3)], [True] * 3) == 4
    assert _size_of("Range", [_i(10), _i(0), _i(1)], [True] * 3) == 0  # an empty range
    assert _size_of("Range", [_i(0), _i(10), _i(0)], [True] * 3) == float("inf")  # a zero step never ends
    assert _size_of("Range", [_i(0), None, _i(1)], [True, False, True]) is None
    assert _size_of("Pad", [None, _i(0, -7, 3)], [False, True]) == 7
    assert _size_of("Relu", [_i(1)], [True]) is None


# ------------------------------------------------------------------------------------------------------ _tensor


def _decode(t) -> tuple[str, object]:
    return _tensor(memoryview(t.SerializeToString()))


@pytest.mark.parametrize("arr", [np.array([[1, -2], [3, 4]], np.int64), np.array([7], np.int32),
                                 np.array([1, 255], np.uint8), np.array([0.5, -1.5], np.float32),
                                 np.array([2.25], np.float64)])
def test_small_tensors_decode_from_raw_bytes(arr):
    name, got = _decode(numpy_helper.from_array(arr, "t"))
    assert name == "t" and np.array_equal(np.asarray(got, arr.dtype), arr) and got.shape == arr.shape


def test_small_tensors_decode_from_typed_fields():
    assert list(_decode(helper.make_tensor("n", TensorProto.INT64, [3], [1, -2, 3]))[1]) == [1, -2, 3]
    got = _decode(helper.make_tensor("f", TensorProto.FLOAT, [2], [0.5, 2.0]))[1]
    assert got.dtype == np.float64 and list(got) == [0.5, 2.0]
    got = _decode(helper.make_tensor("d", TensorProto.DOUBLE, [2], [0.25, 3.0]))[1]
    assert list(got) == [0.25, 3.0]


def test_tensors_left_undecoded_are_none_with_their_name():
    big = numpy_helper.from_array(np.zeros((1 << 16) + 1, np.int8), "big")  # a weight, not a shape
    assert _decode(big) == ("big", None)
    assert _decode(helper.make_tensor("s", TensorProto.STRING, [1], [b"x"])) == ("s", None)
    assert _decode(helper.make_tensor("h", TensorProto.FLOAT16, [1], np.array([1.0], np.float16).view(np.uint16),
                                      raw=False)) == ("h", None)
    raw16 = onnx.TensorProto(name="r", data_type=TensorProto.FLOAT16, dims=[2],
                             raw_data=np.ones(2, np.float16).tobytes())
    assert _decode(raw16) == ("r", None)  # raw bytes of a type it does not read
    short = onnx.TensorProto(name="short", data_type=TensorProto.INT64, dims=[3], int64_data=[1, 2])
    assert _decode(short) == ("short", None)  # fewer values than its dims
    negative = onnx.TensorProto(name="neg", data_type=TensorProto.INT64, dims=[-1], int64_data=[1])
    assert _decode(negative) == ("neg", None)


def test_raw_bytes_too_short_for_the_dims_are_none():
    t = onnx.TensorProto(name="cut", data_type=TensorProto.INT64, dims=[4], raw_data=np.ones(2, np.int64).tobytes())
    assert _decode(t) == ("cut", None)
    odd = onnx.TensorProto(name="odd", data_type=TensorProto.INT32, dims=[1], raw_data=b"\x01\x02\x03")
    assert _decode(odd) == ("odd", None)  # not a whole element: numpy's ValueError is caught


# ------------------------------------------------------------------------------------------------- _input_dims


def test_input_dims_fixed_symbolic_unnamed_and_absent():
    vi = helper.make_tensor_value_info("ids", TensorProto.INT64, ["batch", 7, None])
    assert _input_dims(memoryview(vi.SerializeToString())) == ("ids", ["batch", 7, "ids:2"])
    scalar_any = helper.make_tensor_value_info("x", TensorProto.FLOAT, None)  # no shape at all
    assert _input_dims(memoryview(scalar_any.SerializeToString())) == ("x", [])
    seq = helper.make_tensor_sequence_value_info("s", TensorProto.FLOAT, [2])  # not a tensor type
    assert _input_dims(memoryview(seq.SerializeToString())) == ("s", [])


def test_input_dims_skip_fields_of_a_shape_other_than_its_dims():
    """A TensorShapeProto holds only `dim` (field 1) today; a field a later ONNX adds is skipped, not read as a dim."""
    def ld(field: int, payload: bytes) -> bytes:
        return bytes([field << 3 | 2]) + _varint_bytes(len(payload)) + payload

    dim = ld(1, b"\x08\x05")  # dim_value 5
    shape = dim + b"\x10\x07" + ld(3, b"xyz") + ld(1, ld(2, b"seq"))  # a varint field 2, a field 3, a symbolic dim
    value_info = ld(1, b"ids") + ld(2, ld(1, b"\x08\x07" + ld(2, shape)))
    assert _input_dims(memoryview(value_info)) == ("ids", [5, "seq"])


# ------------------------------------------------------------------------------------------ allocation_problem


def _model(nodes, inits=(), inputs=None) -> bytes:
    inputs = inputs if inputs is not None else [helper.make_tensor_value_info("ids", TensorProto.INT64,
                                                                              ["batch", "tokens"])]
    out = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    graph = helper.make_graph(nodes, "g", inputs, [out], initializer=list(inits))
    return helper.make_model(graph).SerializeToString()


def _i64(name, v):
    return numpy_helper.from_array(np.array(v, np.int64), name)


def test_a_model_without_a_graph_or_without_sized_ops_has_no_problem():
    assert allocation_problem(b"") is None
    assert allocation_problem(onnx.ModelProto(ir_version=8).SerializeToString()) is None
    assert allocation_problem(_model([helper.make_node("Identity", ["ids"], ["y"])])) is None


def test_a_constant_of_shape_from_a_constant_node_is_refused_when_huge_and_accepted_when_small():
    def graph(n):
        return _model([helper.make_node("Constant", [], ["n"], value=helper.make_tensor("v", TensorProto.INT64, [2],
                                                                                        [n, n])),
                       helper.make_node("ConstantOfShape", ["n"], ["y"])])
    assert "ConstantOfShape operator allocates 1,000,000,000,000 elements" in allocation_problem(graph(10**6))
    assert allocation_problem(graph(100)) is None


def test_reshape_squeeze_and_where_carry_a_shape_through_to_expand():
    """Shape(ids) -> Reshape(0) -> Slice(step 2) -> Where -> Neg -> Abs -> Cast -> Expand: known at every step."""
    nodes = [helper.make_node("Shape", ["ids"], ["s"]),
             helper.make_node("Reshape", ["s", "shape0"], ["s2"]),
             helper.make_node("Slice", ["s2", "st", "en", "ax", "step"], ["first"]),
             helper.make_node("Mul", ["first", "big"], ["m"]),
             helper.make_node("Greater", ["m", "zero"], ["pos"]),
             helper.make_node("Where", ["pos", "m", "zero"], ["w"]),
             helper.make_node("Neg", ["w"], ["n"]),
             helper.make_node("Abs", ["n"], ["a"]),
             helper.make_node("Cast", ["a"], ["c"], to=TensorProto.INT64),
             helper.make_node("Expand", ["one", "c"], ["y"])]
    inits = [_i64("shape0", [0]), _i64("st", [0]), _i64("en", [2]), _i64("ax", [0]), _i64("step", [2]),
             _i64("zero", [0]), numpy_helper.from_array(np.array([1.0], np.float32), "one")]
    assert allocation_problem(_model(nodes, inits + [_i64("big", [10**12])])).startswith(
        "its Expand operator allocates 1,000,000,000,000 elements")
    assert allocation_problem(_model(nodes, inits + [_i64("big", [4])])) is None


def test_growth_faster_than_the_input_is_named_with_the_input_sizes():
    nodes = [helper.make_node("Shape", ["ids"], ["s"]),
             helper.make_node("Mul", ["s", "s"], ["sq"]),
             helper.make_node("Mul", ["sq", "sq"], ["q"]),
             helper.make_node("ConstantOfShape", ["q"], ["y"])]
    why = allocation_problem(_model(nodes))
    assert "growing faster than its inputs" in why and "batch = " in why and "tokens = " in why


def test_a_shape_from_a_tensor_value_is_not_known_before_a_run():
    nodes = [helper.make_node("ReduceMax", ["ids"], ["m"], keepdims=1),
             helper.make_node("Mul", ["m", "big"], ["c"]),
             helper.make_node("ConstantOfShape", ["c"], ["y"])]
    assert allocation_problem(_model(nodes, [_i64("big", [10**12])])) is None


def test_ops_that_fail_to_evaluate_leave_the_size_unknown():
    """Reshape to a shape of the wrong count raises inside numpy: the value is unknown, not an error."""
    nodes = [helper.make_node("Reshape", ["big", "bad"], ["r"]),
             helper.make_node("ConstantOfShape", ["r"], ["y"])]
    assert allocation_problem(_model(nodes, [_i64("big", [10**12, 10**12]), _i64("bad", [3])])) is None
    assert allocation_problem(_model(nodes[1:], [_i64("r", [10**12, 10**12])])) is not None  # the same size known


def test_the_input_size_is_the_budget():
    """ALLOC_PER_INPUT elements per input element: a fixed input of 64 elements allows 64 times as much."""
    inputs = [helper.make_tensor_value_info("ids", TensorProto.INT64, [8, 8])]
    nodes = [helper.make_node("ConstantOfShape", ["n"], ["y"])]
    assert allocation_problem(_model(nodes, [_i64("n", [64 * ALLOC_PER_INPUT])], inputs)) is None
    assert allocation_problem(_model(nodes, [_i64("n", [64 * ALLOC_PER_INPUT + 1])], inputs)) is not None


# --------------------------------------------------------------------------------------------- malformed bytes


def _nested_if(levels: int) -> bytes:
    out = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])
    leaf = helper.make_graph([helper.make_node("Constant", [], ["y"], value_float=1.0)], "leaf", [], [out])
    graph = leaf
    for k in range(levels):  # nested in the then branch only: the size grows linearly
        graph = helper.make_graph([helper.make_node("If", ["c"], ["y"], then_branch=graph, else_branch=leaf)],
                                  f"g{k}", [helper.make_tensor_value_info("c", TensorProto.BOOL, [])], [out])
    return helper.make_model(graph).SerializeToString()


def test_graphs_nested_too_deeply_are_one_line():
    assert ("", "If") in operators(_nested_if(3)) and external_tensors(_nested_if(3)) == []
    deep = _nested_if(30)  # each If adds a node, an attribute and a graph: past the depth limit of 64
    for read in (operators, external_tensors):
        with pytest.raises(OndeviceError, match="nested too deeply"):
            read(deep)


@pytest.mark.parametrize("blob", [b"\x3a\x05ab", b"\x3a\xff", b"\x0b"])
def test_malformed_bytes_are_one_line_from_each_reader(blob):
    for read in (operators, external_tensors):
        with pytest.raises(OndeviceError, match="malformed protobuf"):
            read(blob)
    # field 7 (the graph) is the first thing allocation_problem reads
    with pytest.raises(OndeviceError, match="malformed protobuf"):
        allocation_problem(blob)


def test_a_malformed_initializer_is_one_line():
    """A graph with a sized op whose initializer holds a truncated varint: refused as malformed, not a traceback."""
    graph = onnx.load_from_string(_model([helper.make_node("ConstantOfShape", ["n"], ["y"])], [_i64("n", [3])])).graph
    body = graph.SerializeToString() + b"\x2a\x01\x80"  # one more initializer (field 5): the byte 0x80, cut short
    with pytest.raises(OndeviceError, match="malformed protobuf: truncated varint"):
        allocation_problem(b"\x3a" + _varint_bytes(len(body)) + body)
    assert allocation_problem(b"\x3a" + _varint_bytes(len(body) - 3) + body[:-3]) is None  # the same graph, intact


def _varint_bytes(n: int) -> bytes:
    out = bytearray()
    while True:
        out.append((n & 0x7F) | (0x80 if n > 0x7F else 0))
        n >>= 7
        if not n:
            return bytes(out)
