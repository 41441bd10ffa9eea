#!/usr/bin/env python3
"""modal-proto-check.py MODAL_WHEEL PROTOBUF_WHEEL_DIR - check nestbox's vendored subset of
Modal's API (crates/exec/proto/modal/*.proto) against the definitions Modal publishes in its
Python client: every message, enum value, field (name, number, type, label) and RPC kept in
the subset must exist in the wheel, the same. A maintainer's tool, run where PyPI is reachable:

    pip download --no-deps -d /tmp/w modal protobuf
    cd /tmp/w && unzip -q -o protobuf-*.whl -d pb
    python3 scripts/modal-proto-check.py /tmp/w/modal-*.whl /tmp/w/pb

Prints one line per mismatch and exits 1 when there is any.
"""
import ast
import pathlib
import re
import sys
import zipfile

HERE = pathlib.Path(__file__).resolve().parent.parent / "crates/exec/proto/modal"
SCALARS = {1: "double", 2: "float", 3: "int64", 4: "uint64", 5: "int32", 8: "bool",
           9: "string", 12: "bytes", 13: "uint32"}


def published(wheel, module):
    text = zipfile.ZipFile(wheel).read(module).decode()
    blob = re.search(r"AddSerializedFile\((b'.*?')\)", text, re.S).group(1)
    from google.protobuf import descriptor_pb2
    fd = descriptor_pb2.FileDescriptorProto()
    fd.ParseFromString(ast.literal_eval(blob))
    return fd


def index(fd):
    """name -> {field name: (number, type, label)} for messages (nested ones dotted)."""
    out, enums = {}, {}

    def walk(prefix, msgs, ens):
        for e in ens:
            enums[prefix + e.name] = {v.name: v.number for v in e.value}
        for m in msgs:
            fields = {}
            for f in m.field:
                typ = SCALARS.get(f.type) or f.type_name.rsplit(".", 1)[-1]
                label = "repeated" if f.label == 3 else ("optional" if f.proto3_optional else "")
                fields[f.name] = (f.number, typ, label)
            out[prefix + m.name] = fields
            walk(prefix + m.name + ".", m.nested_type, m.enum_type)

    walk("", fd.message_type, fd.enum_type)
    rpcs = {(s.name, m.name): (m.input_type.rsplit(".", 1)[-1], m.output_type.rsplit(".", 1)[-1])
            for s in fd.service for m in s.method}
    return out, enums, rpcs


def vendored(path):
    """The same index, read from our .proto text (its simple, flat style only)."""
    msgs, enums, rpcs, stack, service = {}, {}, {}, [], None
    for raw in path.read_text().splitlines():
        line = raw.split("//")[0].strip()
        if m := re.match(r"(message|enum|oneof) (\w+) \{", line):
            kind, name = m.groups()
            stack.append((kind, name))
            full = ".".join(n for k, n in stack if k != "oneof")
            if kind == "message":
                msgs.setdefault(full, {})
            elif kind == "enum":
                enums[full] = {}
            if line.endswith("{}"):
                stack.pop()
        elif m := re.match(r"service (\w+) \{", line):
            service = m.group(1)
        elif m := re.match(r"rpc (\w+)\((\w+)\) returns \((?:stream )?(\w+)\);", line):
            rpcs[(service, m.group(1))] = (m.group(2), m.group(3))
        elif line == "}":
            if stack:
                stack.pop()
            else:
                service = None
        elif stack and (m := re.match(r"(\w+) = (\d+);", line)) and stack[-1][0] == "enum":
            enums[".".join(n for _, n in stack)][m.group(1)] = int(m.group(2))
        elif stack and (m := re.match(r"(repeated |optional )?(map<string, string>|[\w.]+) (\w+) = (\d+);", line)):
            label, typ, name, num = m.groups()
            full = ".".join(n for k, n in stack if k != "oneof")
            if typ.startswith("map<"):
                typ, label = "EnvEntry", "repeated "
            msgs[full][name] = (int(num), typ.rsplit(".", 1)[-1], (label or "").strip())
    return msgs, enums, rpcs


def main():
    if len(sys.argv) != 3:
        raise SystemExit(__doc__)
    sys.path.insert(0, sys.argv[2])
    bad = 0
    for proto, module in [("api.proto", "modal_proto/api_pb2.py"),
                          ("task_command_router.proto", "modal_proto/task_command_router_pb2.py")]:
        pm, pe, pr = index(published(sys.argv[1], module))
        vm, ve, vr = vendored(HERE / proto)
        for name, fields in vm.items():
            for field, spec in fields.items():
                if pm.get(name, {}).get(field) != spec:
                    print(f"{proto}: {name}.{field} {spec} != published {pm.get(name, {}).get(field)}")
                    bad += 1
        for name, values in ve.items():
            for value, num in values.items():
                if pe.get(name, {}).get(value) != num:
                    print(f"{proto}: enum {name}.{value} = {num} != published {pe.get(name, {}).get(value)}")
                    bad += 1
        for key, io in vr.items():
            if pr.get(key) != io:
                print(f"{proto}: rpc {key} {io} != published {pr.get(key)}")
                bad += 1
        print(f"{proto}: {sum(len(f) for f in vm.values())} fields, {len(vr)} rpcs checked")
    print(f"{bad} mismatches")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
