"""Another user's program on rsad's TCP address while rsad is down (the attack of
tests/security/test_squatter.py, run as rsaother): ``python squat.py HOST:PORT`` binds
the address, prints ``listening``, answers every request 200 with a forged job answer
(its output staged out and verified) and no MUNGE signature, prints one line per request
it answered, and exits when its standard input closes.
"""

from __future__ import annotations

import json
import socket
import sys
import threading
import time


def forged(job_id: str) -> bytes:
    """What the squatter wants a user to believe: the job's output is verified on the
    PFS (so its user deletes their own copy)."""
    now = time.time()
    return json.dumps({
        "job_id": job_id, "user": "rsauser", "job_state": "finished",
        "rsa_state": "output-verified", "message": "output verified on persistent storage",
        "nodes": [], "spec": {"data_out": "/pfs/out"},
        "events": [{"seq": 1, "time": now - 60, "name": "job.state", "from": "running",
                    "to": "finished", "by": "EpilogSlurmctld"},
                   {"seq": 2, "time": now, "name": "rsa.transition", "from": "verifying",
                    "to": "output-verified", "trigger": "verified"}]}).encode()


def serve(listener: socket.socket) -> None:
    while True:
        try:
            conn, _ = listener.accept()
        except OSError:
            return
        with conn:
            conn.settimeout(5)
            buf = b""
            try:
                while b"\r\n\r\n" not in buf and (chunk := conn.recv(65536)):
                    buf += chunk
                line = buf.split(b"\r\n", 1)[0].decode("latin-1")
                job_id = line.split(" ")[1].rstrip("/").split("/")[-1] if " " in line else ""
                body = forged(job_id)
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                             b"Content-Length: " + str(len(body)).encode()
                             + b"\r\nConnection: close\r\n\r\n" + body)
            except OSError:
                continue
            print(f"answered {line}", flush=True)


def main(address: str) -> None:
    host, _, port = address.rpartition(":")
    listener = socket.create_server((host, int(port)))
    print("listening", flush=True)
    threading.Thread(target=serve, args=(listener,), daemon=True).start()
    sys.stdin.read()  # until the test closes it
    listener.close()


if __name__ == "__main__":
    main(sys.argv[1])
