"""The machine a measurement ran on, as the engine's results and the benchmark's reports record
it."""
import datetime
import os
import platform
import re
import subprocess
from pathlib import Path

from .paths import REPO


def available_cores():
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()


def cpu_model():
    """The CPU's model name (/proc/cpuinfo's, else platform.processor())."""
    cpu = platform.processor()
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.is_file():
        found = re.search(r"^model name\s*:\s*(.+)$", cpuinfo.read_text(), re.M)
        cpu = found.group(1).strip() if found else cpu
    return cpu


def utc_now():
    """The time now, UTC, to the second (ISO 8601)."""
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


def git_commit(repo=REPO):
    """The checkout's commit (None outside a git checkout)."""
    git = subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True,
                         text=True)
    return git.stdout.strip() if git.returncode == 0 else None


def machine_info(device, threads):
    """Where a reproduction's runs are made: the device and its name (the CUDA device's, else the
    CPU's), cores, threads per process, torch and Python, the load average, the date, and the
    code: the checkout's commit (None outside a git checkout)."""
    import torch

    return {"device": device,
            "device_name": torch.cuda.get_device_name() if device == "cuda" else cpu_model(),
            "cores": available_cores(), "threads": threads, "torch": torch.__version__,
            "python": platform.python_version(), "load_average": os.getloadavg()[0],
            "date": utc_now(), "git_commit": git_commit()}


def cuda_mps_running(proc="/proc") -> bool:
    """Whether NVIDIA's MPS daemon runs on this machine (a process whose name begins
    ``nvidia-cuda-mps``: the control daemon or its server). Under it every process's kernels
    reach the GPU through the server, which a timing should name: a batch of trainings
    (scripts/gpu-batch.sh) starts one and leaves it running for the next batch on the node."""
    try:
        entries = os.listdir(proc)
    except OSError:
        return False
    for pid in entries:
        if not pid.isdigit():
            continue
        try:
            name = Path(proc, pid, "comm").read_text().strip()
        except OSError:
            continue  # gone, or not ours to read
        if name.startswith("nvidia-cuda-mps"):
            return True
    return False


def bench_machine_info(device, threads, worker_env, load_before):
    """Where the benchmark ran; ``worker_env`` is the versions and device name a worker saw,
    ``load_before`` the 1-minute load average when the benchmark began (other work skews it)."""
    cpu = cpu_model()
    return {
        "device": device,
        "device_name": worker_env["cuda_device"] if device == "cuda" else cpu,
        "cpu_model": cpu,
        "cores": available_cores(),
        "threads": threads,
        "load_average_before": load_before,
        "load_average_after": os.getloadavg()[0],
        "torch": worker_env["torch"],
        "cuda": worker_env["cuda"],
        "fairseq": worker_env["fairseq"],
        "malloc_mmap_threshold": worker_env["malloc_mmap_threshold"],
        "cuda_mps": cuda_mps_running() if device == "cuda" else None,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "git_commit": git_commit(),
        "date": utc_now(),
    }
