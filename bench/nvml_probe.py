"""What NVML says about the processes on GPU 0, alone and beside a second process (issue 56):
pids as NVML gives them against os.getpid(), and per-process utilization samples."""
import os
import subprocess
import sys
import time

import pynvml
import torch

HOG = ("import torch,time\na=torch.randn(8192,8192,device='cuda',dtype=torch.bfloat16)\n"
       "t=time.time()\nwhile time.time()-t<30:\n a@a; torch.cuda.synchronize()")


def show(tag, h):
    procs = pynvml.nvmlDeviceGetComputeRunningProcesses(h)
    gfx = pynvml.nvmlDeviceGetGraphicsRunningProcesses(h)
    util = pynvml.nvmlDeviceGetUtilizationRates(h)
    try:
        samples = pynvml.nvmlDeviceGetProcessUtilization(h, int((time.time() - 2) * 1e6))
        su = [(s.pid, s.smUtil, s.memUtil, s.timeStamp) for s in samples]
    except pynvml.NVMLError as e:
        su = f"error {e}"
    print(tag, "me", os.getpid(), "compute", [(p.pid, p.usedGpuMemory) for p in procs],
          "graphics", [(p.pid, p.usedGpuMemory) for p in gfx], "util", util.gpu, util.memory,
          "per-process", su, flush=True)


pynvml.nvmlInit()
h = pynvml.nvmlDeviceGetHandleByIndex(0)
show("before-cuda", h)
x = torch.randn(4096, 4096, device="cuda")
torch.cuda.synchronize()
show("own-context-idle", h)
for _ in range(200):
    x @ x
torch.cuda.synchronize()
show("after-own-work", h)
hog = subprocess.Popen([sys.executable, "-c", HOG])
time.sleep(8)
print("hog pid", hog.pid)
show("beside-hog", h)
time.sleep(1.5)
show("beside-hog-again", h)
hog.kill()
hog.wait()
time.sleep(2)
show("hog-gone", h)
