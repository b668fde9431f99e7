import numpy as np
import vkhost

with vkhost.Device() as dev:                       # discrete > integrated > virtual > cpu
    a = np.arange(1 << 20, dtype=np.float32)       # your array
    buf = dev.alloc_buffer(a.nbytes)               # device-local VkBuffer
    with dev.register(a):                          # import its pages: copies go direct
        print(buf.write(a), vkhost.stats())        # 'direct', direct_bytes grew by 4 MiB
    pinned = dev.pinned(a.shape, np.float32)       # a NumPy array over pinned memory
    buf.read(pinned); assert (pinned == a).all(); del pinned
    print(vkhost.bench(4 << 20, iters=3, device=dev)["gbps"])
