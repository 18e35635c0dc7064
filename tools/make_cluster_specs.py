"""Regenerate the shipped cluster specs (tf_autoplace/clusters/) from published hardware numbers.

    python tools/make_cluster_specs.py

K80-class (Placeto's setup, p2.8xlarge): one GK210 die per device, 13 SMs at 875 MHz boost,
240 GB/s, compute capability 3.7; Placeto's M = 10.7 GB usable; links 7.6 GB/s with 25 us per
transfer and 5.7 us per op (Placeto appendix A.5/A.7).

V100-class (p3.16xlarge): Tesla V100-SXM2-16GB, 80 SMs at 1530 MHz boost, 900 GB/s HBM2,
compute capability 7.0, 16 GB (15.5 GB usable after the CUDA context); NVLink 2 carries 25 GB/s
per link and direction; we take one link between any two GPUs and 10 us per transfer.

CPU host speed: Grappler's analytical model counts one floating-point operation per core and
cycle; a Broadwell core with AVX2 and two FMA units does up to 32 single-precision flops per
cycle. We set ``speed: 16`` (half of peak) for the host so that CPU-only training is several
times, not two orders of magnitude, slower than one GPU, as the papers measured.

cpu2 (two logical CPU devices of one 2-core host, as a v1 Session with device_count={'CPU': 2}
runs them), from measurements on such a host: TensorFlow runs both devices' ops on one pair of
thread pools, so they share the host's 2 cores (a core group), and a tensor sent between them
is handed over by reference by a Send/Recv pair, about 6 us of executor work on those cores
whatever its size (no per-byte cost).

A100-class and H100-class (an HGX board, every pair of GPUs through NVSwitch, and the host of
the DGX that carries it); every number and its source is in tf_autoplace/clusters/README.md:

- A100-SXM4-80GB: 108 SMs at 1410 MHz boost, 2,039 GB/s HBM2e, compute capability 8.0, 80 GB
  (79.5 GB usable: 0.5 GB for the CUDA context, as for the V100). NVLink 3 gives a GPU 600 GB/s
  in both directions together, so 300 GB/s per direction between any two GPUs of the board;
  PCIe Gen4 x16 to the host 64 GB/s both ways, 32 GB/s per direction. Host: DGX A100, two AMD
  EPYC 7742 (128 cores, 2.25 GHz base, 8 channels of DDR4-3200 each: 409.6 GB/s), 2 TB.
- H100-SXM5-80GB: 132 SMs, 3,350 GB/s HBM3, compute capability 9.0, 80 GB (79.5 usable). Its
  FP32 peak (67 TFLOPS) is 132 SMs x 128 FP32 lanes x 2 flops at 1980 MHz; Grappler's analytical
  model counts 64 lanes per SM for every architecture from 6.0 on (right for V100 and A100), so
  the device gets ``speed: 2``. NVLink 4: 900 GB/s both directions together, 450 GB/s per
  direction between any two GPUs; PCIe Gen5 x16: 128 GB/s both ways, 64 per direction. Host:
  DGX H100, two Xeon Platinum 8480C (112 cores, 2.0 GHz base, 8 channels of DDR5-4800 each:
  614.4 GB/s), 2 TB.
- Both hosts get the half-of-peak ``speed`` the K80/V100 host has: 16 for AVX2 with two FMA
  units (Zen 2), 32 for AVX-512 with two (Sapphire Rapids).
- The GPU<->GPU links (the default) are the NVLink class, the GPU<->host links (listed) the
  PCIe class; 10 us per transfer on both, as for the V100 (no data sheet gives one).
"""

from __future__ import annotations

import os

from absl import app, flags

FLAGS = flags.FLAGS
flags.DEFINE_string("out_dir", "tf_autoplace/clusters", "Where to write the .pbtxt files.")

K80 = dict(memory_bytes=10_700_000_000, num_cores=13, frequency_mhz=875,
           memory_bandwidth_gbps=240, architecture="3.7",
           comment="one K80 die (GK210): Placeto's M = 10.7 GB, 13 SMs, 875 MHz, 240 GB/s")
V100 = dict(memory_bytes=15_500_000_000, num_cores=80, frequency_mhz=1530,
            memory_bandwidth_gbps=900, architecture="7.0",
            comment="V100-SXM2-16GB: 15.5 GB usable, 80 SMs, 1530 MHz, 900 GB/s")
HOST = dict(memory_bytes=524_000_000_000, num_cores=16, frequency_mhz=2300,
            memory_bandwidth_gbps=60, speed=16,
            comment="Xeon E5-2686 v4 host: 488 GiB, 16 cores, 2.3 GHz; speed 16 = AVX2 FMA")
A100 = dict(memory_bytes=79_500_000_000, num_cores=108, frequency_mhz=1410,
            memory_bandwidth_gbps=2039, architecture="8.0", model="NVIDIA A100-SXM4-80GB",
            comment="A100-SXM4-80GB: 79.5 GB usable, 108 SMs, 1410 MHz, 2039 GB/s")
H100 = dict(memory_bytes=79_500_000_000, num_cores=132, frequency_mhz=1980,
            memory_bandwidth_gbps=3350, architecture="9.0", speed=2,
            model="NVIDIA H100 80GB HBM3",
            comment="H100-SXM5-80GB: 79.5 GB usable, 132 SMs, 1980 MHz, 3350 GB/s; speed 2 = "
                    "128 FP32 lanes per SM where Grappler counts 64")
DGX_A100_HOST = dict(memory_bytes=2_000_000_000_000, num_cores=128, frequency_mhz=2250,
                     memory_bandwidth_gbps=409.6, speed=16,
                     comment="DGX A100 host: 2x EPYC 7742, 128 cores, 2.25 GHz, 2 TB; speed "
                             "16 = AVX2 FMA")
DGX_H100_HOST = dict(memory_bytes=2_000_000_000_000, num_cores=112, frequency_mhz=2000,
                     memory_bandwidth_gbps=614.4, speed=32,
                     comment="DGX H100 host: 2x Xeon Platinum 8480C, 112 cores, 2.0 GHz, 2 TB; "
                             "speed 32 = AVX-512 FMA")
CPU0 = "/job:localhost/replica:0/task:0/device:CPU:0"


def device(name: str, kind: str, spec: dict) -> str:
    lines = [f"# {spec['comment']}", "device {", f'  name: "{name}"', f'  kind: "{kind}"']
    for field in ("memory_bytes", "speed", "num_cores", "frequency_mhz",
                  "memory_bandwidth_gbps"):
        if field in spec:
            lines.append(f"  {field}: {spec[field]}")
    for field in ("architecture", "core_group", "model"):
        if field in spec:
            lines.append(f'  {field}: "{spec[field]}"')
    return "\n".join(lines + ["}", ""])


def cluster(title: str, gpu: dict, num_gpus: int, bandwidth: float, latency: float, *,
            host: dict = HOST, host_link: tuple[float, float] | None = None) -> str:
    """A spec of ``num_gpus`` GPUs and ``host``: GPUs linked by the default ``bandwidth`` (GB/s)
    and ``latency`` (us); with ``host_link`` (GB/s, us), every GPU<->host link in both
    directions is listed with those figures."""
    head = (f"# {title}\n# Generated by tools/make_cluster_specs.py; edit that script, not "
            f"this file.\ndefault_bandwidth_gbps: {bandwidth}\ndefault_latency_us: {latency}\n"
            "op_overhead_us: 5.7\n")
    names = [f"/job:localhost/replica:0/task:0/device:GPU:{i}" for i in range(num_gpus)]
    gpus = "".join(device(name, "GPU", gpu) for name in names)
    links = ""
    if host_link is not None:
        link_bandwidth, link_latency = host_link
        links = "".join(
            f'link {{ src: "{src}" dst: "{dst}" bandwidth_gbps: {link_bandwidth} '
            f"latency_us: {link_latency} }}\n"
            for name in names for src, dst in ((name, CPU0), (CPU0, name)))
    return head + gpus + device(CPU0, "CPU", host) + links


def specs() -> dict[str, str]:
    out = {}
    for n in (2, 4, 8):
        out[f"k80x{n}.pbtxt"] = cluster(
            f"{n} K80-class GPUs and their CPU host, Placeto's simulator constants "
            "(7.6 GB/s, 25 us per transfer, 5.7 us per op).", K80, n, 7.6, 25)
        out[f"v100x{n}.pbtxt"] = cluster(
            f"{n} V100-class GPUs (NVLink 2, 25 GB/s, 10 us per transfer) and their CPU host.",
            V100, n, 25, 10)
        out[f"a100x{n}.pbtxt"] = cluster(
            f"{n} A100-SXM4-80GB GPUs of an HGX board (NVLink 3 through NVSwitch: 300 GB/s per "
            "direction between any two, 10 us per transfer) and the DGX A100 host (PCIe Gen4 "
            "x16: 32 GB/s per direction).", A100, n, 300, 10, host=DGX_A100_HOST,
            host_link=(32, 10))
        out[f"h100x{n}.pbtxt"] = cluster(
            f"{n} H100-SXM5-80GB GPUs of an HGX board (NVLink 4 through NVSwitch: 450 GB/s per "
            "direction between any two, 10 us per transfer) and the DGX H100 host (PCIe Gen5 "
            "x16: 64 GB/s per direction).", H100, n, 450, 10, host=DGX_H100_HOST,
            host_link=(64, 10))
    cpu = dict(memory_bytes=8_000_000_000, num_cores=2, frequency_mhz=2000,
               memory_bandwidth_gbps=20, comment="one logical CPU device of a 2-core host")
    out["cpu2.pbtxt"] = (
        "# Two logical CPU devices of one 2-core host, as a v1 Session with "
        "device_count={'CPU': 2}\n# runs them: one pool of threads on the host's 2 cores "
        "(the core group), a tensor between\n# them handed over by reference in about 6 us "
        "of that pool's work. Splitting a graph\n# between them adds work and no cores. "
        "Generated by tools/make_cluster_specs.py.\ndefault_bandwidth_gbps: 1000000\n"
        "default_latency_us: 6\nop_overhead_us: 5.7\n"
        'core_group {\n  name: "host"\n  cores: 2\n}\n' +
        "".join(device(f"/job:localhost/replica:0/task:0/device:CPU:{i}", "CPU",
                       dict(cpu, core_group="host")) for i in range(2)))
    return out


def main(argv):
    del argv
    for name, text in specs().items():
        with open(os.path.join(FLAGS.out_dir, name), "w", encoding="utf-8") as f:
            f.write(text)
        print(f"wrote {os.path.join(FLAGS.out_dir, name)}")


if __name__ == "__main__":
    app.run(main)
