"""benchlib: what bench/run and bench/cnn share: messages, settings from the environment, the
machine's load, OpenBLAS's kernel family per ISA and the spot GEMM peak, and markdown tables.
Each script imports it from its own folder (bench/), with Debian's /usr/bin/python3."""
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "bench", "out")

# The script's name in its messages: bench/run, bench/cnn.
NAME = "bench/" + os.path.basename(sys.argv[0] or "bench")


def say(msg):
    sys.stderr.write(f"{NAME}: {msg}\n")
    sys.stderr.flush()


def die(msg, code=2):
    say(msg)
    sys.exit(code)


def show(path):
    """PATH relative to the repository root where it lies inside it, else as given."""
    path = str(path)
    return os.path.relpath(path, ROOT) if path.startswith(ROOT + os.sep) else path


def env_int(name, default, lo):
    """The whole number in environment variable NAME (DEFAULT when unset or empty); dies when
    it is not one or is below LO."""
    raw = os.environ.get(name, "")
    if raw == "":
        return default
    try:
        v = int(raw)
    except ValueError:
        die(f"{name}={raw!r}: expected a whole number")
    if v < lo:
        die(f"{name}={v}: must be at least {lo}")
    return v


def cpu_busy_seconds():
    """Seconds of CPU time the whole machine has spent busy since boot (all cores), from
    /proc/stat; None where unreadable."""
    try:
        with open("/proc/stat") as f:
            fields = f.readline().split()
        user, nice, system, _idle, _iowait, irq, softirq = (int(x) for x in fields[1:8])
        return (user + nice + system + irq + softirq) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None


def load_average():
    """The 1, 5 and 15 minute load averages, or None."""
    try:
        with open("/proc/loadavg") as f:
            return [float(x) for x in f.read().split()[:3]]
    except (OSError, ValueError):
        return None


# OpenBLAS's kernel family for each ISA of cohort's kernels: the GEMM peak is measured with it,
# and PyTorch (whose products are OpenBLAS's here) gets a setting with it. Some machines set
# OPENBLAS_CORETYPE=Haswell, which under AVX-512 kernels would measure an AVX2 peak.
ISA_CORETYPE = {"avx512": "SkylakeX", "avx2": "Haswell"}


def isa_env(coretype):
    """os.environ with OPENBLAS_CORETYPE set to coretype (the environment's where None)."""
    env = dict(os.environ)
    if coretype:
        env["OPENBLAS_CORETYPE"] = coretype
    return env


def spot_peak(coretype):
    """The all-threads square sgemm rate now with OpenBLAS's coretype kernels
    (bench/out/gemm_peak --spot, about two seconds), or None."""
    exe = os.path.join(OUT, "gemm_peak")
    if not os.access(exe, os.X_OK):
        return None
    r = subprocess.run([exe, "--spot"], capture_output=True, text=True, env=isa_env(coretype))
    try:
        return json.loads(r.stdout)["gflops_all_threads"] if r.returncode == 0 else None
    except (ValueError, KeyError):
        return None


def table(header, rows):
    """A markdown table: the first column left-aligned, the others right-aligned."""
    lines = ["| " + " | ".join(header) + " |",
             "|" + "|".join("---" if i == 0 else "---:" for i in range(len(header))) + "|"]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)
