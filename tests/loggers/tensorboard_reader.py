"""An independent reader for TensorBoard event files, used by tensorboard_logger_test.cpp.

Usage: tensorboard_reader.py PROTO_DIR EVENT_FILE

Checks every TFRecord's framing and masked CRC32C (crcmod's CRC-32C, itself checked against the
standard test vector), decodes each record with protoc-generated classes for
tensorboard_subset.proto, insists that re-serializing each message gives back the exact bytes
(so no field was written with a wrong number, wire type or order), and prints one line per value:
  file_version <version>
  scalar <step> <tag> <value>
  text <step> <tag> <text>
  histogram <step> <tag> <min> <max> <num> <sum> <sum_squares> <buckets> <total count> <last limit>
  hparam <name> <number|string|bool> <value>
  session_end <status name>
Exits non-zero, with a message, on the first problem.
"""
import struct
import subprocess
import sys
import tempfile

import crcmod.predefined

crc32c = crcmod.predefined.mkCrcFun("crc-32c")
if crc32c(b"123456789") != 0xE3069283:
    sys.exit("crcmod's crc-32c fails the standard check value")


def masked(crc):
    return ((((crc >> 15) | (crc << 17)) & 0xFFFFFFFF) + 0xA282EAD8) & 0xFFFFFFFF


def load_protos(proto_dir):
    out = tempfile.mkdtemp()
    subprocess.check_call(["protoc", "--proto_path=" + proto_dir, "--python_out=" + out,
                           "tensorboard_subset.proto"])
    sys.path.insert(0, out)
    import tensorboard_subset_pb2
    return tensorboard_subset_pb2


def records(data):
    pos = 0
    while pos < len(data):
        if len(data) - pos < 12:
            sys.exit("truncated record header at byte %d" % pos)
        header = data[pos:pos + 8]
        (length,) = struct.unpack("<Q", header)
        (header_crc,) = struct.unpack("<I", data[pos + 8:pos + 12])
        if header_crc != masked(crc32c(header)):
            sys.exit("bad length checksum at byte %d" % pos)
        end = pos + 12 + length
        if end + 4 > len(data):
            sys.exit("truncated record at byte %d" % pos)
        payload = data[pos + 12:end]
        (payload_crc,) = struct.unpack("<I", data[end:end + 4])
        if payload_crc != masked(crc32c(payload)):
            sys.exit("bad data checksum at byte %d" % pos)
        yield payload
        pos = end + 4


def parse_exact(cls, payload, what):
    message = cls()
    message.ParseFromString(payload)
    if message.SerializeToString(deterministic=True) != payload:
        sys.exit("%s does not re-serialize to the same bytes: %r" % (what, message))
    return message


def main():
    pb = load_protos(sys.argv[1])
    with open(sys.argv[2], "rb") as f:
        data = f.read()
    for payload in records(data):
        event = parse_exact(pb.Event, payload, "Event")
        kind = event.WhichOneof("what")
        if kind == "file_version":
            print("file_version", event.file_version)
            continue
        if kind != "summary":
            sys.exit("unexpected event kind %s" % kind)
        for value in event.summary.value:
            plugin = value.metadata.plugin_data.plugin_name
            which = value.WhichOneof("value")
            if plugin == "hparams":
                data = parse_exact(pb.HParamsPluginData, value.metadata.plugin_data.content, "HParamsPluginData")
                if data.version != 0:
                    sys.exit("hparams plugin data version %d; TensorBoard reads only 0" % data.version)
                section = data.WhichOneof("data")
                if section == "session_start_info":
                    if value.tag != "_hparams_/session_start_info":
                        sys.exit("session start under tag " + value.tag)
                    for name in sorted(data.session_start_info.hparams):
                        v = data.session_start_info.hparams[name]
                        k = v.WhichOneof("kind")
                        print("hparam", name, k.replace("_value", ""), repr(getattr(v, k)))
                elif section == "session_end_info":
                    if value.tag != "_hparams_/session_end_info":
                        sys.exit("session end under tag " + value.tag)
                    print("session_end", pb.Status.Name(data.session_end_info.status))
                else:
                    sys.exit("unexpected hparams section %s" % section)
            elif which == "simple_value":
                print("scalar", event.step, value.tag, repr(value.simple_value))
            elif which == "tensor" and plugin == "text":
                parse_exact(pb.TextPluginData, value.metadata.plugin_data.content, "TextPluginData")
                t = value.tensor
                if t.dtype != pb.DT_STRING or [d.size for d in t.tensor_shape.dim] != [1]:
                    sys.exit("text tensor is not a DT_STRING of shape [1]: %r" % t)
                print("text", event.step, value.tag, t.string_val[0].decode("utf-8").replace("\n", "\\n"))
            elif which == "histo":
                h = value.histo
                if len(h.bucket) != len(h.bucket_limit):
                    sys.exit("histogram with %d buckets but %d limits" % (len(h.bucket), len(h.bucket_limit)))
                if list(h.bucket_limit) != sorted(h.bucket_limit):
                    sys.exit("histogram bucket limits are not ascending")
                print("histogram", event.step, value.tag, repr(h.min), repr(h.max), repr(h.num), repr(h.sum),
                      repr(h.sum_squares), len(h.bucket), repr(sum(h.bucket)), repr(h.bucket_limit[-1]))
            else:
                sys.exit("unexpected summary value %r" % value)


main()
