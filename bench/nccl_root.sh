#!/usr/bin/env sh
# nccl_root.sh - print the folder of the NCCL that PyTorch's wheel ships (nvidia/nccl, holding
# include/nccl.h and lib/libnccl.so.2), for cmake -DWEFT_NCCL_ROOT=...; exit 1 if there is none.
exec python3 -c '
import sys
try:
    import nvidia.nccl as m
except ImportError:
    sys.exit("nccl_root.sh: no nvidia.nccl Python package (pip install nvidia-nccl-cu13)")
print(list(m.__path__)[0])
'
