"""The kinds of device: a base class (base.py) and one subclass per kind (cpu.py, planning.py,
cuda.py), plus the CPU's streams and events (streams.py). Users create devices through
nnmem.device (SINGA's module): create_cpu_device(), create_planning_device(), create_cuda_gpu().
"""
