#!/usr/bin/env python3
"""Slow clients against `spool serve`, on loopback, bounded in count and time.

Starts `spool serve` (the binary given) on a fresh store on 127.0.0.1, opens WAVES
waves of 500 connections that each send half a request head and stop, closes each
wave after 0.2 s, and prints the server's resident memory before, at the end and
after the connections are gone, then checks that it still answers /healthz.

    cargo build --release -p spool-cli
    python3 scripts/slow-clients.py target/release/spool 38   # 19,000 connections

See docs/performance.md for the figures.
"""
import re
import socket
import subprocess
import sys
import tempfile
import time


def rss_mb(pid):
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS"):
                return int(line.split()[1]) // 1024
    return -1


def main():
    binary = sys.argv[1]
    waves = min(int(sys.argv[2]) if len(sys.argv) > 2 else 38, 100)
    store = tempfile.mkdtemp()
    server = subprocess.Popen(
        [binary, "serve", "--store", f"{store}/s.spool", "--addr", "127.0.0.1:0"],
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        addr = None
        for line in server.stderr:
            found = re.search(r"listening on http://([\d.:]+)", line)
            if found:
                addr = found.group(1)
                break
        host, port = addr.rsplit(":", 1)
        port = int(port)
        time.sleep(1)
        print(f"before: {rss_mb(server.pid)} MB resident")
        opened = 0
        began = time.time()
        for _ in range(waves):
            wave = []
            for _ in range(500):
                try:
                    client = socket.create_connection((host, port), timeout=2)
                    client.send(b"GET /v1/tasks HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: " + b"a" * 2000)
                    wave.append(client)
                except OSError:
                    pass
            opened += len(wave)
            time.sleep(0.2)
            for client in wave:
                client.close()
        took = time.time() - began
        print(f"{opened} slow connections in {took:.1f} s: {rss_mb(server.pid)} MB resident")
        time.sleep(2)
        print(f"after they closed: {rss_mb(server.pid)} MB resident")
        probe = socket.create_connection((host, port), timeout=5)
        probe.send(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
        print("then /healthz:", probe.recv(200).split(b"\r\n")[0].decode())
    finally:
        server.terminate()
        server.wait(30)


if __name__ == "__main__":
    main()
