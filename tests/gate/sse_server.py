"""A tiny standard-library SSE server for the client's failure-mode tests (run as a
script: ``python sse_server.py PORT``). Behaviour is picked by ``max_new_tokens``:

8 normal stream, 2 tokens per chunk every 50 ms (as under speculative decoding);
9 HTTP 500; 10 an ``error`` event after one chunk; 11 hangs after one chunk;
12 resets the connection after one chunk; 13 stops at 5 of 13 tokens;
14 a finish_reason of type abort. Non-stream requests get ``output_ids`` 0..n-1.
"""

import json
import socket
import struct
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def chunk(ct: int, finish: object = None) -> bytes:
    meta = {"completion_tokens": ct, "finish_reason": finish}
    return b"data: " + json.dumps({"text": "x" * ct, "meta_info": meta}).encode() + b"\n\n"


class H(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.0"

    def log_message(self, *a: object) -> None:
        pass

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        n = body["sampling_params"]["max_new_tokens"]
        if not body.get("stream"):
            data = json.dumps({"output_ids": list(range(n)), "meta_info": {}}).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
            return
        if n == 9:
            self.send_response(500)
            self.end_headers()
            self.wfile.write(b'{"error": {"message": "internal boom"}}')
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        self.wfile.write(b": keep-alive comment\n\n")
        self.wfile.write(chunk(2))
        self.wfile.flush()
        if n == 10:
            self.wfile.write(b'data: {"error": {"message": "scheduler died"}}\n\n')
        elif n == 11:
            time.sleep(30)
        elif n == 12:
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            self.connection.close()
            return
        elif n == 13:
            for ct in (4, 5):
                time.sleep(0.02)
                self.wfile.write(chunk(ct))
        elif n == 14:
            self.wfile.write(chunk(3, {"type": "abort", "message": "client disconnected"}))
        else:
            for ct in range(4, n + 1, 2):
                time.sleep(0.05)
                self.wfile.write(chunk(ct, {"type": "length"} if ct == n else None))
                self.wfile.flush()
        self.wfile.write(b"data: [DONE]\n\n")


if __name__ == "__main__":
    server = ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), H)
    server.daemon_threads = True
    print("ready", flush=True)
    server.serve_forever()
