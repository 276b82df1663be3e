"""What `strata serve`'s operations options cost: the broker bench (bench/broker.py, official
Python client) run plain and with `--metrics`, `--acl`, both, and TLS, side by side in one
run; JSON lines.

    python bench/broker_security.py [--messages N] [--producers 1] [--flush async]

Each row is bench/broker.py's ``send`` / ``receive_ack`` row (from its ``strata_case``) plus
``variant`` and ``vs_plain`` (its msgs/s divided by the first plain variant's in the same
run). On a shared machine compare ``server_cpu_ms_per_msg`` (the broker process's CPU time
per message, from /proc) rather than msgs/s, which moves with the other processes' load.
Under ``--flush sync`` the disk's fsync rate is measured once first (a ``fsync`` row). The
ACL has one account with PUB|SUB on the topic and the group; TLS uses a self-signed certificate for
127.0.0.1 made with the openssl CLI, trusted by the clients through
GRPC_DEFAULT_SSL_ROOTS_FILE_PATH.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from broker import fsync_rate, strata_case  # noqa: E402  (bench/broker.py)

ACL = """accounts:
  - accessKey: bench-ak
    secretKey: bench-secret
    topicPerms: ["bench=PUB|SUB"]
    groupPerms: ["bench-g=SUB"]
"""
KEYS = {"BENCH_AK": "bench-ak", "BENCH_SK": "bench-secret"}


def self_signed(root: Path) -> tuple[Path, Path]:
    cert, key = root / "cert.pem", root / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                    "ec_paramgen_curve:prime256v1", "-nodes", "-keyout", str(key), "-out",
                    str(cert), "-days", "1", "-subj", "/CN=strata-bench", "-addext",
                    "subjectAltName=IP:127.0.0.1"], check=True, capture_output=True)
    return cert, key


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--messages", type=int, default=10_000)
    ap.add_argument("--size", type=int, default=100)
    ap.add_argument("--window", type=int, default=32)
    ap.add_argument("--producers", type=int, default=1)
    ap.add_argument("--flush", default="async")
    ap.add_argument("--variants", default="plain,metrics,acl,acl+metrics,tls")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        (root / "home").mkdir()
        acl = root / "acl.yml"
        acl.write_text(ACL)
        cert, key = self_signed(root)
        variants = {
            "plain": ((), {}),
            "metrics": (("--metrics", "127.0.0.1:0"), {}),
            "acl": (("--acl", str(acl)), KEYS),
            "acl+metrics": (("--acl", str(acl), "--metrics", "127.0.0.1:0"), KEYS),
            "tls": (("--tls-cert", str(cert), "--tls-key", str(key)),
                    {"BENCH_TLS": "1", "GRPC_DEFAULT_SSL_ROOTS_FILE_PATH": str(cert)}),
        }
        disk = None
        if a.flush == "sync":    # only sets the send rows' fsync_share
            disk = fsync_rate(root)
            print(json.dumps({"bench": "broker_security", "case": "fsync",
                              "fsyncs_per_s": round(disk)}), flush=True)
        plain: dict[str, float] = {}
        for name in a.variants.split(","):
            serve_args, env = variants[name]
            rows = strata_case(root, a.flush, a.producers, a.messages, a.size, a.window,
                               disk, serve_args=serve_args, client_env=env,
                               suffix="-" + name.replace("+", "-"))
            for row in rows:
                row["bench"], row["variant"] = "broker_security", name
                if name == "plain" and row["case"] not in plain:
                    plain[row["case"]] = row["msgs_per_s"]
                if row["case"] in plain:
                    row["vs_plain"] = round(row["msgs_per_s"] / plain[row["case"]], 3)
                print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
