/*
 * VKHOST_LOADER_MISSING through the C ABI: run by scripts/capi-test with LD_LIBRARY_PATH naming a
 * directory whose libvulkan.so.1 is an empty shared library (no vkGetInstanceProcAddr), so
 * vkhost cannot load a Vulkan loader. Every entry point that needs one must answer
 * LOADER_MISSING with a message, never crash.
 */
#include "vkhost.h"

#include <stdio.h>
#include <string.h>

int main(void) {
    int failures = 0;
    size_t n = 99;
    vkhost_device *dev = NULL;
    vkhost_status s = vkhost_device_count(&n);
    if (s != VKHOST_LOADER_MISSING || strlen(vkhost_last_error_message()) == 0) {
        fprintf(stderr, "FAIL vkhost_device_count = %s (%s)\n", vkhost_status_name((int32_t)s), vkhost_last_error_message());
        failures++;
    }
    s = vkhost_device_open_default(&dev);
    if (s != VKHOST_LOADER_MISSING || dev != NULL) {
        fprintf(stderr, "FAIL vkhost_device_open_default = %s (%s)\n", vkhost_status_name((int32_t)s), vkhost_last_error_message());
        failures++;
    }
    printf("test_loader_missing: %s (%s)\n", failures ? "FAILED" : "all passed", vkhost_last_error_message());
    return failures ? 1 : 0;
}
