#include <stdio.h>
#include "vkhost.h"
int main(void) {
    vkhost_device *dev; vkhost_buffer *buf; void *p; uint64_t vkbuf, off; vkhost_host_stats st;
    if (vkhost_device_open_default(&dev) != VKHOST_OK) { fprintf(stderr, "%s\n", vkhost_last_error_message()); return 1; }
    vkhost_alloc_pinned(dev, 1 << 20, &p);                 /* pinned host memory */
    vkhost_buffer_alloc(dev, 1 << 20, &buf);               /* device-local VkBuffer */
    vkhost_copy_to_device(dev, p, 1 << 20, buf, 0, NULL);  /* one vkCmdCopyBuffer, no staging */
    vkhost_find(dev, p, 4096, &vkbuf, &off);               /* the VkBuffer behind p, for your own commands */
    vkhost_stats(&st); printf("direct %llu bytes, staged %llu\n", (unsigned long long)st.direct_bytes, (unsigned long long)st.staged_bytes);
    vkhost_buffer_free(buf); vkhost_free_pinned(dev, p); vkhost_device_destroy(dev); return vkhost_device_release(dev);
}
