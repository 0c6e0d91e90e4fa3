"""A PyTorch memory snapshot pickle read as a stream, in memory that grows with the distinct call stacks rather than
with the file: a snapshot of recorded history over 1 GB (millions of trace entries, each with its frames) unpickles
to many GB of dicts, which the plain reader cannot hold.

The reader walks the pickle's opcodes itself (a subset of the format: the containers, strings and numbers a
snapshot is made of) and refuses every opcode that names a class or function, builds an object or holds a
persistent reference, before anything runs. While it reads:
- a frame dict (`filename`, `line`, `name`) becomes the pair (filename, name);
- a list of frames becomes a `Frames` token: the phase its frames name (memory_snapshot.phase_of) and whether it
  had any; torch shares one list between an allocation and its free, the token is shared the same way;
- a trace entry (a dict with `action`) becomes a row of a `Trace`: arrays of action, address, size, time and
  phase; the trace list itself stays empty.
The memo keeps what a later reference may need (strings, frames, tokens), a byte per slot for the rest.
"""

from __future__ import annotations

import re
import struct
from array import array
from typing import Any, Callable, Iterator

MAX_STRING = 1 << 24      # one string of the pickle: a frame's file name, never this long
MAX_LONG = 64             # bytes of one integer: addresses and sizes fit in 8
MAX_MEMO_JUMP = 1 << 20   # a memo slot this far past the last: picklers number their slots one by one

ACTIONS = ("alloc", "free_requested", "free_completed", "segment_alloc", "segment_free", "segment_map",
           "segment_unmap", "snapshot", "oom", "user_defined")
_ACTION_CODE = {a: i for i, a in enumerate(ACTIONS)}
_REFUSED = {0x63: "GLOBAL", 0x93: "STACK_GLOBAL", 0x52: "REDUCE", 0x62: "BUILD", 0x69: "INST", 0x6F: "OBJ",
            0x81: "NEWOBJ", 0x92: "NEWOBJ_EX", 0x50: "PERSID", 0x51: "BINPERSID", 0x82: "EXT1", 0x83: "EXT2",
            0x84: "EXT4", 0x96: "BYTEARRAY8", 0x97: "NEXT_BUFFER", 0x98: "READONLY_BUFFER"}


class Refused(Exception):
    """The pickle names a class or function, or builds an object: nothing of it ran."""


class Broken(Exception):
    """The pickle is cut short, or holds an opcode or a value this reader does not take."""


class Shape(Broken):
    """A whole pickle, whose trace entry departs from torch's format (the message names the entry)."""


class Frames:
    """A list of frames, reduced to what categorising needs: the phase its frames name, and whether it had any."""

    __slots__ = ("phase", "framed")

    def __init__(self, phase: str | None, framed: bool) -> None:
        self.phase, self.framed = phase, framed

    def __bool__(self) -> bool:
        return self.framed

    def __len__(self) -> int:
        return int(self.framed)


class _Pair(tuple):
    """A frame, as read: (filename, name); its own type, so no other pair of the pickle passes for a frame."""


class _Entry(tuple):
    """A trace entry, as read: (action, addr, size, time_us, frames, category, keys)."""


_MISSING = object()


class Trace:
    """One device's trace entries, column by column; `trace[i]` (and iteration) gives entry i as a small dict."""

    def __init__(self) -> None:
        self.action = bytearray()
        self.addr = array("q")
        self.size = array("q")
        self.time = array("q")
        self.frames = bytearray()                  # each entry's Frames token, as its index in _TOKEN_LIST
        self.categories: dict[int, str] = {}       # entries that carry their own `category` (rare)
        self.has_time = True

    def __len__(self) -> int:
        return len(self.action)

    def __getitem__(self, i: int) -> dict[str, Any]:
        if i < 0:
            i += len(self.action)
        e: dict[str, Any] = {"action": ACTIONS[self.action[i]], "addr": self.addr[i], "size": self.size[i],
                             "frames": _TOKEN_LIST[self.frames[i]]}
        if self.has_time:
            e["time_us"] = self.time[i]
        if i in self.categories:
            e["category"] = self.categories[i]
        return e

    def __iter__(self) -> Iterator[dict[str, Any]]:
        tokens, categories, timed = _TOKEN_LIST, self.categories, self.has_time
        for i, (a, addr, size, t, f) in enumerate(zip(self.action, self.addr, self.size, self.time, self.frames)):
            e = {"action": ACTIONS[a], "addr": addr, "size": size, "frames": tokens[f]}
            if timed:
                e["time_us"] = t
            if categories and i in categories:
                e["category"] = categories[i]
            yield e

    def add(self, e: _Entry, where: Callable[[], str]) -> None:
        action, addr, size, time_us, frames, category, _ = e
        code = _ACTION_CODE.get(action) if type(action) is str else None
        if code is None:
            raise Shape(f"{where()} has action {action!r}; expected one of {', '.join(ACTIONS)}")
        if code < 7:   # an event on a block or segment: its address and size
            if type(addr) is not int or type(size) is not int or not -2**63 <= addr < 2**63:
                raise Shape(f"{where()} ({action}) needs integer 'addr' and 'size'")
            if not 0 <= size <= 1 << 50:
                raise Shape(f"{where()} ({action}) needs integer 'addr' and 'size' (bytes from 0 to 2**50)")
        else:
            addr = addr if type(addr) is int and -2**63 <= addr < 2**63 else 0
            size = 0
        if type(frames) is not Frames:
            if frames is not None and not isinstance(frames, list):
                raise Shape(f"{where()} has 'frames' that are not a list of frame dicts")
            frames = _token(frames or [])
        self.action.append(code)
        self.addr.append(addr)
        self.size.append(size)
        if type(time_us) is int and -2**63 <= time_us < 2**63:
            self.time.append(time_us)
        else:
            self.time.append(0)
            self.has_time = False
        self.frames.append(_TOKEN_LIST.index(frames))
        if isinstance(category, str):
            self.categories[len(self.action) - 1] = category


def _whole(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


_TOKENS: dict[tuple[str | None, bool], Frames] = {}   # one token per (phase, framed): a handful in all
_TOKEN_LIST: list[Frames] = []
_phase_fn: Callable[[list[tuple[str, str]]], str | None] | None = None


def _token(frames: list) -> Frames:
    assert _phase_fn is not None
    pairs = [f if isinstance(f, tuple) else (str(f.get("filename", "")), str(f.get("name", "")))
             for f in frames if isinstance(f, (tuple, dict))]
    key = (_phase_fn(pairs), bool(frames))
    token = _TOKENS.get(key)
    if token is None:
        token = _TOKENS[key] = Frames(*key)
        _TOKEN_LIST.append(token)
    return token


_FRAME_KEYS = {"filename", "line", "name"}
# EMPTY_LIST, its memo slot (MEMOIZE, BINPUT or LONG_BINPUT), MARK, references (BINGET / LONG_BINGET), APPENDS, and
# no second batch after it: a list of frames torch shares from its frame table.
_FRAMES_LIST = re.compile(rb"\](\x94|q.|r.{4})\(((?:h.|j.{4})+)e(?!\()", re.S)


def load(f: Any, phase_of_pairs: Callable[[list[tuple[str, str]]], str | None]) -> Any:
    """The snapshot's content, its trace entries as Trace columns and its frames as Frames tokens (module
    docstring). Raises Refused or Broken, never runs anything the pickle names."""
    global _phase_fn
    _phase_fn = phase_of_pairs
    return _Reader(f).run()


class _Reader:
    def __init__(self, f: Any) -> None:   # a binary file: open() or gzip.open()
        self.f = f
        self.buf = b""
        self.pos = 0
        # The memo, a slot per MEMOIZE: a container still referenced as itself in `memo`; every other slot one int
        # in `refs`: > 0 a value of `values` (numbers, strings, frames: each distinct value once, however many
        # slots hold it: torch writes a new 'N/A' string per trace entry), -1 a trace entry (read once), <= -2 a
        # Frames token. 4 bytes a slot, whatever the slot holds.
        self.memo: dict[int, Any] = {}
        self.memo_open: dict[int, int] = {}          # id of a container being built -> its memo index
        self.refs = array("i")
        self.values: list[Any] = []
        self.value_ids: dict[tuple[type, Any], int] = {}
        self.tokens: list[Frames] = []
        self.slots = 0                               # MEMOIZE's next index
        self.stack_cache: dict[bytes, Frames] = {}   # the bytes of a frames list's references -> its token
        self.traces: dict[int, Trace] = {}           # id of a trace list -> its columns
        self.order: list[int] = []

    def read(self, n: int) -> bytes:
        if self.pos + n > len(self.buf):
            chunk = self.f.read(max(n, 1 << 20))
            self.buf = self.buf[self.pos:] + chunk
            self.pos = 0
            if n > len(self.buf):
                raise Broken("the pickle is cut short")
        out = self.buf[self.pos:self.pos + n]
        self.pos += n
        return out

    def line(self) -> bytes:
        out = b""
        while True:
            c = self.read(1)
            if c == b"\n":
                return out
            out += c
            if len(out) > 256:
                raise Broken("a text-protocol value runs past 256 bytes")

    def refill(self) -> None:
        """At least 1 MiB ahead of pos in the buffer (less only at the end of the file)."""
        chunk = self.f.read(1 << 22)
        self.buf = self.buf[self.pos:] + chunk
        self.pos = 0

    def run(self) -> Any:
        stack: list[Any] = []
        marks: list[int] = []
        self.refill()
        buf, pos, blen = self.buf, 0, len(self.buf)
        get, put, finish, extend = self.get, self.put, self.finish_dict, self.extend
        from_bytes = int.from_bytes
        refs, values = self.refs, self.values   # grown in place: the same objects throughout
        while True:
            if pos + 512 > blen:   # the hot opcodes below read at most 260 bytes straight from the buffer
                self.pos = pos
                self.refill()
                buf, pos, blen = self.buf, 0, len(self.buf)
            op = buf[pos]
            pos += 1
            if op == 0x6A or op == 0x68:                     # LONG_BINGET, BINGET
                if op == 0x68:
                    index = buf[pos]
                    pos += 1
                else:
                    index = from_bytes(buf[pos:pos + 4], "little")
                    pos += 4
                ref = refs[index] if index < len(refs) else 0
                stack.append(values[ref - 1] if ref > 0 else get(index))   # a value (most), else the slow path
            elif op == 0x94:                                 # MEMOIZE
                put(self.slots, stack[-1])
            elif op == 0x28:                                 # MARK
                marks.append(len(stack))
            elif op == 0x8A:                                 # LONG1
                n = buf[pos]
                stack.append(from_bytes(buf[pos + 1:pos + 1 + n], "little", signed=True))
                pos += 1 + n
            elif op == 0x8C:                                 # SHORT_BINUNICODE
                n = buf[pos]
                stack.append(buf[pos + 1:pos + 1 + n].decode("utf-8", "surrogatepass"))
                pos += 1 + n
            elif op == 0x4B:                                 # BININT1
                stack.append(buf[pos])
                pos += 1
            elif op == 0x7D:                                 # EMPTY_DICT
                stack.append({})
            elif op == 0x75:                                 # SETITEMS
                base = marks.pop()
                items = stack[base:]
                del stack[base:]
                d = stack[-1]
                if not isinstance(d, dict):
                    raise Broken("SETITEMS on something that is not a dict")
                try:
                    d.update(zip(items[::2], items[1::2]))
                except TypeError:
                    raise Broken("a dict key that is not a string or a number") from None
                stack[-1] = finish(d)
            elif op == 0x5D:                                 # EMPTY_LIST
                m = _FRAMES_LIST.match(buf, pos - 1)
                self.pos = pos
                token = self.frames_list(m) if m is not None else None
                if token is None or m is None:
                    stack.append([])
                else:
                    stack.append(token)
                    pos = m.end()
            elif op == 0x65:                                 # APPENDS
                base = marks.pop()
                items = stack[base:]
                del stack[base:]
                stack[-1] = extend(stack[-1], items)
            elif op == 0x4A:                                 # BININT
                stack.append(from_bytes(buf[pos:pos + 4], "little", signed=True))
                pos += 4
            elif op == 0x4D:                                 # BININT2
                stack.append(from_bytes(buf[pos:pos + 2], "little"))
                pos += 2
            else:
                self.pos = pos
                done, value = self.other(op, stack, marks)
                if done:
                    return value
                buf, pos, blen = self.buf, self.pos, len(self.buf)

    def other(self, op: int, stack: list[Any], marks: list[int]) -> tuple[bool, Any]:  # noqa: C901 - a dispatch
        """The opcodes a snapshot holds few of, read through self.read; (True, content) at STOP."""
        u32, u64 = struct.Struct("<I"), struct.Struct("<Q")
        read = self.read
        if op == 0x61:                                 # APPEND
            item = stack.pop()
            stack[-1] = self.extend(stack[-1], [item])
        elif op == 0x73:                                 # SETITEM
            v, k = stack.pop(), stack.pop()
            if not isinstance(stack[-1], dict):
                raise Broken("SETITEM on something that is not a dict")
            stack[-1][_key(k)] = v
            stack[-1] = self.finish_dict(stack[-1])
        elif op == 0x95:                                 # FRAME: a length hint only
            read(8)
        elif op in (0x88, 0x89, 0x4E):                   # NEWTRUE, NEWFALSE, NONE
            stack.append(True if op == 0x88 else False if op == 0x89 else None)
        elif op == 0x86:                                 # TUPLE2
            b, a = stack.pop(), stack.pop()
            stack.append((a, b))
        elif op == 0x85:                                 # TUPLE1
            stack.append((stack.pop(),))
        elif op == 0x87:                                 # TUPLE3
            c, b, a = stack.pop(), stack.pop(), stack.pop()
            stack.append((a, b, c))
        elif op == 0x29:                                 # EMPTY_TUPLE
            stack.append(())
        elif op == 0x74:                                 # TUPLE
            base = marks.pop()
            items = tuple(stack[base:])
            del stack[base:]
            stack.append(items)
        elif op == 0x47:                                 # BINFLOAT
            stack.append(struct.unpack(">d", read(8))[0])
        elif op == 0x58:                                 # BINUNICODE
            stack.append(self.text(u32.unpack(read(4))[0]))
        elif op == 0x8D:                                 # BINUNICODE8
            stack.append(self.text(u64.unpack(read(8))[0]))
        elif op in (0x43, 0x42, 0x8E, 0x55, 0x54):       # SHORT_BINBYTES, BINBYTES, BINBYTES8, (SHORT_)BINSTRING
            n = (read(1)[0] if op in (0x43, 0x55) else u64.unpack(read(8))[0] if op == 0x8E
                 else u32.unpack(read(4))[0])
            if n > MAX_STRING:
                raise Broken(f"a byte string of {n} bytes")
            raw = read(n)
            stack.append(raw if op in (0x43, 0x42, 0x8E) else raw.decode("latin-1"))
        elif op == 0x8B:                                 # LONG4
            n = u32.unpack(read(4))[0]
            if n > MAX_LONG:
                raise Broken(f"an integer of {n} bytes")
            stack.append(int.from_bytes(read(n), "little", signed=True))
        elif op == 0x71:                                 # BINPUT
            self.put(read(1)[0], stack[-1])
        elif op == 0x72:                                 # LONG_BINPUT
            self.put(u32.unpack(read(4))[0], stack[-1])
        elif op == 0x70:                                 # PUT
            self.put(int(self.line()), stack[-1])
        elif op == 0x67:                                 # GET
            stack.append(self.get(int(self.line())))
        elif op in (0x49, 0x4C):                         # INT, LONG (text)
            text = self.line().rstrip(b"L")
            stack.append({b"00": False, b"01": True}.get(text, None) if text in (b"00", b"01") else int(text))
        elif op == 0x8F:                                 # EMPTY_SET
            stack.append(set())
        elif op == 0x90:                                 # ADDITEMS
            base = marks.pop()
            added = stack[base:]
            del stack[base:]
            stack[-1].update(added)
        elif op == 0x91:                                 # FROZENSET
            base = marks.pop()
            members = stack[base:]
            del stack[base:]
            stack.append(frozenset(members))
        elif op == 0x30:                                 # POP
            if marks and marks[-1] == len(stack):
                marks.pop()
            else:
                stack.pop()
        elif op == 0x31:                                 # POP_MARK
            del stack[marks.pop():]
        elif op == 0x32:                                 # DUP
            stack.append(stack[-1])
        elif op == 0x80:                                 # PROTO
            read(1)
        elif op == 0x2E:                                 # STOP
            if len(stack) != 1:
                raise Broken("STOP with more than one value on the stack")
            return True, self.result(stack[0])
        elif op in _REFUSED:
            raise Refused(self.refusal(op, stack))
        else:
            raise Broken(f"opcode 0x{op:02x} is not one a memory snapshot holds")
        return False, None

    def frames_list(self, m: Any) -> Frames | None:
        """A list of frames referenced from the memo, read whole by one match (most of a large snapshot's bytes):
        its token, looked up by the bytes of its references (the same stack, the same bytes), memoized as the
        list would be. None: not a list of known frames (read op by op instead)."""
        refs = m.group(2)
        token = self.stack_cache.get(refs)
        if token is None:
            frames = []
            at = 0
            while at < len(refs):
                if refs[at] == 0x68:
                    index, at = refs[at + 1], at + 2
                else:
                    index, at = int.from_bytes(refs[at + 1:at + 5], "little"), at + 5
                frame = self.slot(index)
                if type(frame) is not _Pair:
                    return None
                frames.append(frame)
            token = self.stack_cache[refs] = _token(frames)
        put = m.group(1)
        index = (self.slots if put == b"\x94" else put[1] if put[0] == 0x71
                 else int.from_bytes(put[1:5], "little"))
        self.slots = max(self.slots, index + 1)
        self.set_ref(index, self.token_ref(token))
        return token

    def refusal(self, op: int, stack: list[Any]) -> str:
        if op == 0x93 and len(stack) >= 2 and all(isinstance(s, str) for s in stack[-2:]):
            return f"it names {stack[-2]}.{stack[-1]}"
        if op == 0x63:
            module, name = self.line(), self.line()
            return f"it names {module.decode('latin-1')}.{name.decode('latin-1')}"
        if op in (0x50, 0x51):
            return "it holds a persistent reference"
        return f"it builds an object ({_REFUSED[op]})"

    def text(self, n: int) -> str:
        if n > MAX_STRING:
            raise Broken(f"a string of {n} bytes")
        return self.read(n).decode("utf-8", "surrogatepass")

    def put(self, index: int, value: Any) -> None:
        self.slots = max(self.slots, index + 1)
        if isinstance(value, (dict, list, set)):
            self.memo_open[id(value)] = index
            self.memo[index] = value
        elif isinstance(value, Frames):
            self.set_ref(index, self.token_ref(value))
        else:
            self.set_ref(index, self.value_ref(value))

    def value_ref(self, value: Any) -> int:
        key = (type(value), value)   # the type too: 1, 1.0 and True are equal keys
        try:
            vid = self.value_ids.get(key)
            hashable = True
        except TypeError:            # a tuple holding a list: kept whole, once per slot
            vid, hashable = None, False
        if vid is None:
            self.values.append(value)
            vid = len(self.values)
            if hashable:
                self.value_ids[key] = vid
        return vid

    def token_ref(self, token: Frames) -> int:
        if token not in self.tokens:
            self.tokens.append(token)
        return -2 - self.tokens.index(token)

    def set_ref(self, index: int, ref: int) -> None:
        refs = self.refs
        if index >= len(refs):
            if index > len(refs) + MAX_MEMO_JUMP:   # a slot no pickler numbers so: 4 bytes a slot up to it
                raise Broken(f"memo slot {index}, far beyond the {len(refs)} before it")
            refs.frombytes(bytes(4 * max(index + 1 - len(refs), len(refs) // 4 + 1024)))   # zeros: empty
        refs[index] = ref
        self.memo.pop(index, None)

    def slot(self, index: int) -> Any:
        """The value at a memo slot, or None where `get` would refuse it (an empty or a dropped slot)."""
        try:
            return self.get(index)
        except Broken:
            return None

    def get(self, index: int) -> Any:
        value = self.memo.get(index, _DROPPED)
        if value is not _DROPPED:
            return value
        ref = self.refs[index] if index < len(self.refs) else 0
        if ref > 0:
            return self.values[ref - 1]
        if ref <= -2:
            return self.tokens[-2 - ref]
        if ref == -1:
            raise Broken("a trace entry is referenced twice; expected each entry once in its trace")
        raise Broken(f"a reference to memo slot {index}, which holds nothing")

    def finish_dict(self, d: dict) -> Any:
        """A dict whose items are all set: a frame becomes its (filename, name), a trace entry an _Entry."""
        if "action" in d:
            frames = d.get("frames")
            if isinstance(frames, list):      # an empty list (frames arrive as tokens): one token for all of them
                token = _token(frames)
                self.replace(frames, token)
                frames = token
            entry = _Entry((d.get("action"), d.get("addr"), d.get("size"), d.get("time_us", _MISSING),
                            frames, d.get("category"), None))
            self.replace(d, _DROPPED)
            return entry
        if d and d.keys() <= _FRAME_KEYS:
            pair = _Pair((str(d.get("filename", "")), str(d.get("name", ""))))
            self.replace(d, pair)
            return pair
        return d

    def extend(self, target: Any, items: list[Any]) -> Any:
        """APPEND(S): trace entries stream into their list's columns; a list of frames becomes a Frames token."""
        if not isinstance(target, list):
            raise Broken("APPENDS on something that is not a list")
        if items and isinstance(items[0], _Entry):
            trace = self.traces.get(id(target))
            if trace is None:
                trace = self.traces[id(target)] = Trace()
                self.order.append(id(target))
                self.memo_open.pop(id(target), None)
            device = len(self.order) - 1
            for item in items:
                if not isinstance(item, _Entry):
                    raise Shape(f"device_traces[{device}][{len(trace)}] is not a trace entry dict")
                trace.add(item, lambda: f"device_traces[{device}][{len(trace)}]")
            return target
        if items and not target and all(type(i) is _Pair for i in items):
            token = _token(items)
            self.replace(target, token)
            return token
        target.extend(items)
        return target

    def replace(self, container: Any, value: Any) -> None:
        """The memo slot of a finished container: its reduced form, or (an entry, a token) a byte."""
        index = self.memo_open.pop(id(container), None)
        if index is None:
            return
        if value is _DROPPED:
            self.set_ref(index, -1)
        elif isinstance(value, Frames):
            self.set_ref(index, self.token_ref(value))
        elif isinstance(value, (dict, list)):
            self.memo[index] = value
        else:
            self.set_ref(index, self.value_ref(value))

    def result(self, top: Any) -> Any:
        """The content, each trace list swapped for its columns (an empty list for a device without entries)."""
        if isinstance(top, dict) and isinstance(top.get("device_traces"), list):
            top["device_traces"] = [self.traces.get(id(t), t) if isinstance(t, list) else t
                                    for t in top["device_traces"]]
        self.memo.clear()
        self.values.clear()
        self.value_ids.clear()
        return top


_DROPPED = object()


def _key(k: Any) -> Any:
    try:
        hash(k)
    except TypeError:
        raise Broken(f"a dict key of type {type(k).__name__}") from None
    return k
