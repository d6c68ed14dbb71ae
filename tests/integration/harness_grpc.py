"""The gRPC half of the integration tests' harness (harness.py is the rest):
clients of the daemon's gRPC listener (rls.listen).

  pb = protos()                 classes generated from src/proto with protoc
                                (protobuf-compiler) into a temp dir: pb.rls
                                (envoy.service.ratelimit.v3), pb.health
  c = Client(port)              grpcio (Debian python3-grpcio) channel:
                                c.check(domain, [[(k, v), ...], ...]),
                                c.health(service), c.call(path, bytes)
  Raw(port)                     an HTTP/2 connection by hand (Debian
                                python3-h2): frames in, events out, for what a
                                well-behaved client never sends
  frame(msg)                    gRPC's 5-byte length prefix
  node_client(spec)             the same calls through @grpc/grpc-js (npm ci
                                of tests/integration/grpc_node into a temp dir)

Debian's python3-grpcio, python3-protobuf and python3-h2 live in the system
Python's path, which a pyenv or venv python3 does not search: it is added.
A missing tool or package is a failure (HarnessError), never a skip.
"""

import importlib.util
import json
import os
import shutil
import socket
import struct
import subprocess
import sys
import threading
import time

import harness as H

try:
    import grpc
except ImportError:
    sys.path.append("/usr/lib/python3/dist-packages")
    try:
        import grpc
    except ImportError:
        grpc = None
try:
    import h2.config
    import h2.connection
    import h2.events
    import h2.exceptions
    import h2.settings
    import hpack
except ImportError:
    h2 = None

PROTO_DIR = os.path.join(H.RL_SRCDIR, "src", "proto")
SHOULD_RATE_LIMIT = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"
HEALTH_CHECK = "/grpc.health.v1.Health/Check"
NODE_DIR = os.path.join(H.HERE, "grpc_node")

_protos = None
_lock = threading.Lock()


class Protos:
    pass


def _need_grpc():
    if grpc is None:
        raise H.HarnessError("python grpc not importable: install the Debian package python3-grpcio")


def protos():
    """The generated classes (once per process)."""
    global _protos
    with _lock:
        if _protos is not None:
            return _protos
        _need_grpc()
        if shutil.which("protoc") is None:
            raise H.HarnessError("protoc not found in PATH (Debian package protobuf-compiler)")
        out = os.path.join(H.tmpdir(), "pb")
        os.makedirs(out, exist_ok=True)
        files = ["envoy/service/ratelimit/v3/rls.proto",
                 "envoy/extensions/common/ratelimit/v3/ratelimit.proto",
                 "envoy/type/v3/ratelimit_unit.proto", "envoy/config/core/v3/base.proto",
                 "grpc/health/v1/health.proto",
                 # rules over xDS (harness_xds.py): google/rpc is not in
                 # python3-protobuf, so ours joins the google namespace here
                 "envoy/service/discovery/v3/discovery.proto",
                 "ratelimit/config/ratelimit/v3/rls_conf.proto", "google/rpc/status.proto"]
        # google/protobuf/* are not generated: python3-protobuf has the real
        # Duration and UInt64Value, which ours must match on the wire
        r = subprocess.run(["protoc", "-I", PROTO_DIR, "--python_out", out] + files,
                           capture_output=True, timeout=60)
        if r.returncode != 0:
            raise H.HarnessError("protoc failed: %s" % r.stderr.decode())
        if out not in sys.path:
            sys.path.insert(0, out)
        pb = Protos()
        from envoy.service.ratelimit.v3 import rls_pb2
        pb.rls = rls_pb2
        from envoy.service.discovery.v3 import discovery_pb2
        from ratelimit.config.ratelimit.v3 import rls_conf_pb2
        pb.discovery, pb.rls_conf = discovery_pb2, rls_conf_pb2
        # "grpc" is grpcio's package name too: health's module by its path
        spec = importlib.util.spec_from_file_location(
            "rl_health_pb2", os.path.join(out, "grpc", "health", "v1", "health_pb2.py"))
        pb.health = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(pb.health)
        _protos = pb
        return pb


def request(domain, descriptors, hits_addend=0):
    """A RateLimitRequest: descriptors as [[(key, value), ...] or a dict with
    "entries", "hits_addend" (None: absent), "limit" ((n, unit))]."""
    pb = protos()
    req = pb.rls.RateLimitRequest(domain=domain, hits_addend=hits_addend)
    for d in descriptors:
        if not isinstance(d, dict):
            d = {"entries": d}
        m = req.descriptors.add()
        for k, v in d["entries"]:
            e = m.entries.add()
            e.key, e.value = k, v
        if d.get("hits_addend") is not None:
            m.hits_addend.value = d["hits_addend"]
        if d.get("limit") is not None:
            m.limit.requests_per_unit, m.limit.unit = d["limit"]
    return req


class Client:
    """One grpcio channel to 127.0.0.1:port (TLS with creds, a
    grpc.ssl_channel_credentials)."""

    def __init__(self, port, creds=None, name=None, target=None):
        pb = protos()
        self.pb = pb
        target = target or "127.0.0.1:%d" % port
        opts = [("grpc.use_local_subchannel_pool", 1), ("grpc.enable_retries", 0)]
        if name:
            opts.append(("grpc.ssl_target_name_override", name))
        self.channel = (grpc.secure_channel(target, creds, options=opts) if creds is not None
                        else grpc.insecure_channel(target, options=opts))
        self._srl = self.channel.unary_unary(
            SHOULD_RATE_LIMIT, request_serializer=pb.rls.RateLimitRequest.SerializeToString,
            response_deserializer=pb.rls.RateLimitResponse.FromString)
        self._health = self.channel.unary_unary(
            HEALTH_CHECK, request_serializer=pb.health.HealthCheckRequest.SerializeToString,
            response_deserializer=pb.health.HealthCheckResponse.FromString)

    def check(self, domain, descriptors, hits_addend=0, timeout=H.HTTP_TIMEOUT, metadata=None):
        """The RateLimitResponse (grpc.RpcError on a status)."""
        return self._srl(request(domain, descriptors, hits_addend), timeout=timeout,
                         metadata=metadata)

    def check_future(self, domain, descriptors, hits_addend=0, timeout=H.HTTP_TIMEOUT):
        return self._srl.future(request(domain, descriptors, hits_addend), timeout=timeout)

    def wait_ready(self, timeout=H.START_TIMEOUT):
        """Connect now (HTTP/2 settings exchanged): a channel otherwise
        connects at its first call, under gRPC's own connect deadline."""
        grpc.channel_ready_future(self.channel).result(timeout=timeout)

    def health(self, service="", timeout=H.HTTP_TIMEOUT):
        """"SERVING" / "NOT_SERVING" (grpc.RpcError on a status)."""
        r = self._health(self.pb.health.HealthCheckRequest(service=service), timeout=timeout)
        return self.pb.health.HealthCheckResponse.ServingStatus.Name(r.status)

    def call(self, path, data, timeout=H.HTTP_TIMEOUT):
        """Any method, bytes in and out."""
        m = self.channel.unary_unary(path, request_serializer=lambda b: b,
                                     response_deserializer=lambda b: b)
        return m(data, timeout=timeout)

    def close(self):
        self.channel.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False


def status_of(fn, *args, **kw):
    """(grpc status name, details) of a call expected to fail; ("OK", result) when not."""
    _need_grpc()
    try:
        return "OK", fn(*args, **kw)
    except grpc.RpcError as e:
        return e.code().name, e.details()


def frame(msg, compressed=False):
    return struct.pack(">BI", 1 if compressed else 0, len(msg)) + msg


# ------------------------------------------------------------- raw HTTP/2

def h2_frame(ftype, flags, stream_id, payload):
    """One HTTP/2 frame's bytes, by hand."""
    return struct.pack(">I", len(payload))[1:] + struct.pack(">BBI", ftype, flags,
                                                              stream_id) + payload


class Raw:
    """An HTTP/2 connection driven by hand (h2 as the frame codec, its own
    checks relaxed), for requests and floods a real client never makes.

        r = Raw(port); sid = r.request(path, body, headers=...)
        events = r.until(lambda ev: ..., timeout)  # h2 events seen
    """

    GRPC_HEADERS = [("content-type", "application/grpc"), ("te", "trailers")]

    def __init__(self, port, timeout=H.HTTP_TIMEOUT, preface=True):
        if h2 is None:
            raise H.HarnessError("python h2 not importable: install the Debian package python3-h2")
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        cfg = h2.config.H2Configuration(client_side=True, header_encoding="utf-8",
                                        validate_outbound_headers=False,
                                        normalize_outbound_headers=False,
                                        validate_inbound_headers=False)
        self.conn = h2.connection.H2Connection(config=cfg)
        self.events = []
        self.closed = False
        self.goaway = None
        if preface:
            self.conn.initiate_connection()
            self.flush()

    def flush(self):
        """Send what h2 has queued; a connection the server ended is closed."""
        data = self.conn.data_to_send()
        if data:
            try:
                self.sock.sendall(data)
            except OSError:
                self.closed = True
                raise

    def send_raw(self, data):
        self.sock.sendall(data)

    def request(self, path, body=None, headers=None, end=True, method="POST"):
        sid = self.conn.get_next_available_stream_id()
        hdrs = [(":method", method), (":scheme", "http"), (":path", path),
                (":authority", "127.0.0.1")] + (self.GRPC_HEADERS if headers is None else headers)
        self.conn.send_headers(sid, hdrs, end_stream=body is None and end)
        if body is not None:
            self.conn.send_data(sid, body, end_stream=end)
        self.flush()
        return sid

    def read(self, timeout):
        """One batch of events (EOF: closed)."""
        self.sock.settimeout(timeout)
        try:
            data = self.sock.recv(65536)
        except socket.timeout:
            return []
        except OSError:
            data = b""
        if not data:
            self.closed = True
            return []
        try:
            evs = self.conn.receive_data(data)
        except h2.exceptions.ProtocolError:
            evs = []
        for ev in evs:
            if isinstance(ev, h2.events.ConnectionTerminated):
                self.goaway = ev
        self.events += evs
        try:
            self.flush()  # h2's own answers (SETTINGS ack, WINDOW_UPDATE)
        except OSError:
            pass  # the server ended the connection (flush marked it closed)
        return evs

    def until(self, cond, timeout=H.HTTP_TIMEOUT):
        """Read until cond(self) is true (True) or timeout / close (False)."""
        deadline = time.monotonic() + timeout
        while not cond(self):
            left = deadline - time.monotonic()
            if left <= 0 or self.closed:
                return cond(self)
            self.read(min(left, 0.5))
        return True

    def headers_of(self, sid):
        """Every header the stream got (response and trailers), as a dict."""
        out = {}
        for ev in self.events:
            if isinstance(ev, (h2.events.ResponseReceived, h2.events.TrailersReceived)) \
                    and ev.stream_id == sid:
                for k, v in ev.headers:
                    out[k if isinstance(k, str) else k.decode()] = \
                        v if isinstance(v, str) else v.decode()
        return out

    def data_of(self, sid):
        return b"".join(ev.data for ev in self.events
                        if isinstance(ev, h2.events.DataReceived) and ev.stream_id == sid)

    def ended(self, sid):
        return any(isinstance(ev, (h2.events.StreamEnded, h2.events.StreamReset))
                   and ev.stream_id == sid for ev in self.events)

    def answer(self, sid, timeout=H.HTTP_TIMEOUT):
        """(headers incl. trailers, data) once the stream ended."""
        if not self.until(lambda r: r.ended(sid), timeout):
            raise H.HarnessError("stream %d: no end within %ss (closed=%s)"
                                 % (sid, timeout, self.closed))
        return self.headers_of(sid), self.data_of(sid)

    def answer_after_goaway(self, sid, timeout=H.HTTP_TIMEOUT):
        """(headers, data) of stream sid read by hand until the server
        closes: the h2 library drops what comes after a GOAWAY."""
        self.sock.settimeout(timeout)
        buf = b""
        while True:
            try:
                chunk = self.sock.recv(65536)
            except (socket.timeout, OSError):
                break
            if not chunk:
                break
            buf += chunk
        hdrs, data, i = {}, b"", 0
        while i + 9 <= len(buf):
            n = int.from_bytes(buf[i:i + 3], "big")
            ftype, flags = buf[i + 3], buf[i + 4]
            fsid = int.from_bytes(buf[i + 5:i + 9], "big") & 0x7fffffff
            payload = buf[i + 9:i + 9 + n]
            i += 9 + n
            if ftype == 1:  # HEADERS (no padding or priority from nghttp2 here)
                for k, v in self.conn.decoder.decode(payload):
                    if fsid == sid:
                        hdrs[k if isinstance(k, str) else k.decode()] = \
                            v if isinstance(v, str) else v.decode()
            elif ftype == 0 and fsid == sid:
                data += payload
        return hdrs, data

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False


# -------------------------------------------------------------- grpc-js

def node_client(spec, timeout=120):
    """Run tests/integration/grpc_node/client.js with spec (a dict; "protos"
    added): the list of results it prints.  The packages come from its
    package-lock.json (npm ci), once per process."""
    _node_dir = H.node_project(NODE_DIR, ("package.json", "package-lock.json", ".npmrc",
                                          "client.js"))
    spec = dict(spec, protos=PROTO_DIR)
    path = os.path.join(_node_dir, "spec-%d.json" % threading.get_ident())
    with open(path, "w") as f:
        json.dump(spec, f)
    r = subprocess.run(["node", os.path.join(_node_dir, "client.js"), path], cwd=_node_dir,
                       capture_output=True, timeout=timeout)
    if r.returncode != 0:
        raise H.HarnessError("node client.js failed (%d):\n%s" % (r.returncode, r.stderr.decode()))
    return json.loads(r.stdout.decode())
