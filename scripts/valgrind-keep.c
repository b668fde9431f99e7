/* Preloaded into the programs scripts/memcheck and scripts/capi-test run under valgrind.
 *
 * Every device test creates and destroys its own VkInstance, and the Vulkan loader unloads the
 * driver (lavapipe, which links LLVM) and the validation layer when the last instance goes.
 * Under valgrind each reload costs ~10 s of symbol and debug-info reading, most of a test's time:
 * 95 s for the soundness tests, 32 s with this. Loading both once, RTLD_NODELETE, keeps them
 * mapped for the whole process; RTLD_LOCAL keeps their symbols out of the global scope (the
 * layer exports vkCreateInstance & co., which must keep resolving to the loader). A library
 * that is not installed is skipped: dlopen fails, nothing else changes. The same code runs and
 * valgrind still checks every access of it; what this run no longer exercises, a driver unloaded
 * and reloaded between instances, the normal test run (`cargo test`, no preload) still does. */
#include <dlfcn.h>

__attribute__((constructor)) static void vkhost_keep_loaded(void) {
  (void)dlopen("libvulkan_lvp.so", RTLD_LAZY | RTLD_LOCAL | RTLD_NODELETE);
  (void)dlopen("libVkLayer_khronos_validation.so", RTLD_LAZY | RTLD_LOCAL | RTLD_NODELETE);
}
