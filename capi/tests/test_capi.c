/*
 * The C ABI test: every function in include/vkhost.h, every status reachable on this device,
 * a copy spanning two registrations and a gap, streams and events, a device wrapped from its own
 * Vulkan handles, and teardown tombstones. Run by `make capi-test` (also under valgrind) with
 * the validation layer on; exits non-zero on any failure or validation error.
 *
 * Not reachable here: the statuses of a failing driver (OUT_OF_HOST_MEMORY, OUT_OF_DEVICE_MEMORY,
 * DEVICE_LOST, VULKAN: crates/vkhost-capi/tests/faults.rs reaches them through this ABI by fault
 * injection), LOADER_MISSING (capi/tests/test_loader_missing.c, run without a loader), those
 * of safe Rust guards (OWNED_BY_GUARD, BUSY), and INTERNAL (a caught panic: a unit test in
 * crates/vkhost-capi/src/lib.rs). The test lists what it saw.
 */
#include "vkhost.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

static int failures;
static int seen[VKHOST_INTERNAL + 1];

static void expect(vkhost_status got, vkhost_status want, const char *what, int line) {
    const char *msg = vkhost_last_error_message();
    if (got != want) {
        fprintf(stderr, "FAIL line %d: %s = %s, want %s (%s)\n", line, what, vkhost_status_name((int32_t)got),
                vkhost_status_name((int32_t)want), msg);
        failures++;
        return;
    }
    if ((int)got >= 0 && (int)got <= VKHOST_INTERNAL) seen[got] = 1;
    /* The message describes the last call: empty after success, set after failure. */
    if ((got == VKHOST_OK) != (msg[0] == '\0')) {
        fprintf(stderr, "FAIL line %d: %s: message \"%s\" does not match %s\n", line, what, msg,
                vkhost_status_name((int32_t)got));
        failures++;
    }
}

#define EXPECT(call, want) expect((call), (want), #call, __LINE__)
#define OK(call) EXPECT(call, VKHOST_OK)
#define CHECK(cond)                                                          \
    do {                                                                     \
        if (!(cond)) {                                                       \
            fprintf(stderr, "FAIL line %d: %s\n", __LINE__, #cond);          \
            failures++;                                                      \
        }                                                                    \
    } while (0)

static void fill(unsigned char *p, size_t n, unsigned seed) {
    for (size_t i = 0; i < n; i++) p[i] = (unsigned char)((i * 131u + seed) ^ (i >> 9));
}

/* NULL handles and out-pointers: a status, never a crash. */
static void null_arguments(void) {
    vkhost_device *d = NULL;
    vkhost_buffer *b = NULL;
    vkhost_stream *s = NULL;
    vkhost_event *e = NULL;
    void *p = NULL;
    size_t n;
    uint64_t u, v;
    bool flag;
    vkhost_device_info info;
    vkhost_open_options opts;
    vkhost_raw_device raw;
    vkhost_host_stats st;
    vkhost_host_counters ct = {.struct_size = sizeof ct};
    const vkhost_status N = VKHOST_NULL_ARGUMENT;

    EXPECT(vkhost_device_count(NULL), N);
    EXPECT(vkhost_device_enumerate(0, NULL), N);
    EXPECT(vkhost_open_options_default(NULL), N);
    EXPECT(vkhost_device_open(0, NULL), N);
    EXPECT(vkhost_device_open_default(NULL), N);
    EXPECT(vkhost_device_open_with(0, NULL, &d), N);
    OK(vkhost_open_options_default(&opts));
    EXPECT(vkhost_device_open_with(0, &opts, NULL), N);
    EXPECT(vkhost_device_from_vulkan(NULL, 0, NULL, &d), N);
    memset(&raw, 0, sizeof raw);
    EXPECT(vkhost_device_from_vulkan(&raw, 0, NULL, NULL), N);
    EXPECT(vkhost_device_raw(NULL, &raw), N);
    EXPECT(vkhost_device_get_info(NULL, &info), N);
    EXPECT(vkhost_device_registration(NULL, &n), N);
    EXPECT(vkhost_device_destroy(NULL), N);
    EXPECT(vkhost_device_release(NULL), N);
    EXPECT(vkhost_device_is_destroyed(NULL, &flag), N);
    EXPECT(vkhost_device_validation_errors(NULL, &u), N);
    EXPECT(vkhost_device_trim_pinned_cache(NULL, &u), N);
    EXPECT(vkhost_alloc_pinned(NULL, 4096, &p), N);
    EXPECT(vkhost_free_pinned(NULL, p), N);
    EXPECT(vkhost_register(NULL, &n, sizeof n), N);
    EXPECT(vkhost_unregister(NULL, &n), N);
    EXPECT(vkhost_find(NULL, &n, 1, &u, &v), N);
    EXPECT(vkhost_copy_to_device(NULL, &n, 1, b, 0, NULL), N);
    EXPECT(vkhost_copy_to_host(NULL, b, 0, &n, 1, NULL), N);
    EXPECT(vkhost_stats(NULL), N);
    EXPECT(vkhost_device_stats(NULL, &st), N);
    EXPECT(vkhost_counters(NULL), N);
    EXPECT(vkhost_device_counters(NULL, &ct), N);
    EXPECT(vkhost_buffer_alloc(NULL, 4096, &b), N);
    EXPECT(vkhost_buffer_free(NULL), N);
    EXPECT(vkhost_buffer_len(NULL, &n), N);
    EXPECT(vkhost_buffer_handle(NULL, &u), N);
    EXPECT(vkhost_stream_create(NULL, VKHOST_QUEUE_COPY, &s), N);
    EXPECT(vkhost_stream_destroy(NULL), N);
    EXPECT(vkhost_stream_copy_to_device_async(NULL, &n, 1, b, 0), N);
    EXPECT(vkhost_stream_copy_to_host_async(NULL, b, 0, &n, 1), N);
    EXPECT(vkhost_stream_copy_buffer_async(NULL, b, 0, b, 0, 1), N);
    EXPECT(vkhost_stream_fill_async(NULL, b, 0, 4, 0), N);
    EXPECT(vkhost_stream_flush(NULL), N);
    EXPECT(vkhost_stream_record(NULL, &e), N);
    EXPECT(vkhost_stream_wait_event(NULL, e), N);
    EXPECT(vkhost_stream_synchronize(NULL), N);
    EXPECT(vkhost_event_wait(NULL), N);
    EXPECT(vkhost_event_query(NULL, &flag), N);
    EXPECT(vkhost_event_release(NULL), N);
    CHECK(strstr(vkhost_last_error_message(), "event") != NULL);
}

static void statuses(void) {
    CHECK(strcmp(vkhost_status_name(VKHOST_OK), "VKHOST_OK") == 0);
    CHECK(strcmp(vkhost_status_name(VKHOST_NOT_REGISTERED), "VKHOST_NOT_REGISTERED") == 0);
    CHECK(strcmp(vkhost_status_name(VKHOST_INTERNAL), "VKHOST_INTERNAL") == 0);
    CHECK(strcmp(vkhost_status_name(-1), "VKHOST_UNKNOWN_STATUS") == 0);
    CHECK(strcmp(vkhost_status_name(VKHOST_INTERNAL + 1), "VKHOST_UNKNOWN_STATUS") == 0);
}

static void enumeration(void) {
    size_t n = 0;
    vkhost_device_info info;
    vkhost_device *d = (vkhost_device *)0x1;
    OK(vkhost_device_count(&n));
    CHECK(n >= 1);
    for (size_t i = 0; i < n; i++) {
        OK(vkhost_device_enumerate(i, &info));
        CHECK(info.index == i);
        CHECK(info.name[0] != '\0');
        CHECK(info.device_type <= VKHOST_DEVICE_OTHER);
        printf("device %zu: %s (type %d, Vulkan %u.%u, import alignment %zu)\n", i, info.name, (int)info.device_type,
               info.api_major, info.api_minor, info.host_import_alignment);
    }
    EXPECT(vkhost_device_enumerate(n, &info), VKHOST_NO_DEVICE);
    EXPECT(vkhost_device_open(n + 5, &d), VKHOST_NO_DEVICE);
    CHECK(d == (vkhost_device *)0x1); /* out-pointers are written only on success */
}

static void bad_options(void) {
    vkhost_open_options o;
    vkhost_device *d = NULL;
    OK(vkhost_open_options_default(&o));
    CHECK(o.staging_chunk >= 4096 && o.staging_slots >= 2);
    o.staging_chunk = 1;
    EXPECT(vkhost_device_open_with(VKHOST_DEFAULT_DEVICE, &o, &d), VKHOST_INVALID_ARGUMENT);
    OK(vkhost_open_options_default(&o));
    o.import_policy = 7;
    EXPECT(vkhost_device_open_with(VKHOST_DEFAULT_DEVICE, &o, &d), VKHOST_INVALID_ARGUMENT);
    OK(vkhost_open_options_default(&o));
    o.copy_queue = 9;
    EXPECT(vkhost_device_open_with(VKHOST_DEFAULT_DEVICE, &o, &d), VKHOST_INVALID_ARGUMENT);
    CHECK(d == NULL);
}

/* Imports off by policy: register is UNSUPPORTED, copies stage. */
static void import_never(void) {
    vkhost_open_options o;
    vkhost_device *d = NULL;
    vkhost_buffer *b = NULL;
    size_t g;
    vkhost_copy_path path;
    OK(vkhost_open_options_default(&o));
    o.validation = 1;
    o.import_policy = VKHOST_IMPORT_NEVER;
    OK(vkhost_device_open_with(VKHOST_DEFAULT_DEVICE, &o, &d));
    if (!d) return;
    unsigned char *m = malloc(8192);
    EXPECT(vkhost_device_registration(d, &g), VKHOST_UNSUPPORTED);
    EXPECT(vkhost_register(d, m, 8192), VKHOST_UNSUPPORTED);
    OK(vkhost_buffer_alloc(d, 8192, &b));
    fill(m, 8192, 3);
    OK(vkhost_copy_to_device(d, m, 8192, b, 0, &path));
    CHECK(path == VKHOST_PATH_STAGED);
    OK(vkhost_buffer_free(b));
    OK(vkhost_device_destroy(d));
    OK(vkhost_device_release(d));
    free(m);
}

int main(void) {
    setvbuf(stdout, NULL, _IONBF, 0);
    statuses();
    null_arguments();
    enumeration();
    bad_options();

    /* The main device, validation on. */
    vkhost_open_options o;
    vkhost_device *dev = NULL;
    OK(vkhost_open_options_default(&o));
    o.validation = 1;
    OK(vkhost_device_open_with(VKHOST_DEFAULT_DEVICE, &o, &dev));
    if (!dev) {
        fprintf(stderr, "no device: %s\n", vkhost_last_error_message());
        return 1;
    }
    vkhost_device_info info;
    OK(vkhost_device_get_info(dev, &info));
    bool destroyed = true;
    OK(vkhost_device_is_destroyed(dev, &destroyed));
    CHECK(!destroyed);
    size_t granule = 0;
    OK(vkhost_device_registration(dev, &granule));
    CHECK(granule >= 4096 && (granule & (granule - 1)) == 0);
    const size_t G = granule;

    /* ---- pinned blocks ---- */
    void *pinned = NULL;
    uint64_t vkbuf = 0, off = 0;
    EXPECT(vkhost_alloc_pinned(dev, 0, &pinned), VKHOST_INVALID_ARGUMENT);
    EXPECT(vkhost_alloc_pinned(dev, (size_t)-1, &pinned), VKHOST_INVALID_ARGUMENT);
    OK(vkhost_alloc_pinned(dev, 4 * G, &pinned));
    CHECK(pinned != NULL);
    OK(vkhost_find(dev, pinned, 4 * G, &vkbuf, &off));
    CHECK(vkbuf != 0 && off == 0);
    OK(vkhost_find(dev, (char *)pinned + 100, 10, &vkbuf, &off));
    CHECK(off == 100);
    EXPECT(vkhost_find(dev, pinned, 4 * G + 1, &vkbuf, &off), VKHOST_NOT_REGISTERED);
    EXPECT(vkhost_find(dev, pinned, 1, NULL, &off), VKHOST_NULL_ARGUMENT);
    EXPECT(vkhost_free_pinned(dev, (char *)pinned + 1), VKHOST_NOT_PINNED);
    EXPECT(vkhost_unregister(dev, pinned), VKHOST_NOT_REGISTERED);
    EXPECT(vkhost_register(dev, pinned, G), VKHOST_ALREADY_REGISTERED);

    /* ---- registrations: A (4 granules), a gap (1), B (4), one mapping ---- */
    size_t span = 9 * G;
    unsigned char *m = mmap(NULL, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    CHECK(m != MAP_FAILED);
    unsigned char *A = m, *gap = m + 4 * G, *B = m + 5 * G;
    OK(vkhost_register(dev, A, 4 * G));
    OK(vkhost_register(dev, B, 4 * G));
    EXPECT(vkhost_register(dev, A + G, G), VKHOST_ALREADY_REGISTERED);
    EXPECT(vkhost_register(dev, NULL, G), VKHOST_INVALID_ARGUMENT);
    EXPECT(vkhost_register(dev, gap, 0), VKHOST_INVALID_ARGUMENT);
    EXPECT(vkhost_register(dev, gap, (size_t)-1), VKHOST_INVALID_ARGUMENT);
    void *unmapped = mmap(NULL, G, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    munmap(unmapped, G);
    EXPECT(vkhost_register(dev, unmapped, G), VKHOST_INVALID_ARGUMENT);
    void *readonly = mmap(NULL, G, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    EXPECT(vkhost_register(dev, readonly, G), VKHOST_INVALID_ARGUMENT);
    munmap(readonly, G);
    EXPECT(vkhost_unregister(dev, A + 8), VKHOST_NOT_REGISTERED);
    EXPECT(vkhost_free_pinned(dev, A), VKHOST_NOT_PINNED);
    OK(vkhost_find(dev, B + 10, 100, &vkbuf, &off));
    CHECK(off == 10);
    EXPECT(vkhost_find(dev, gap, 1, &vkbuf, &off), VKHOST_NOT_REGISTERED);
    EXPECT(vkhost_find(dev, A, span, &vkbuf, &off), VKHOST_NOT_REGISTERED);

    /* ---- device buffers and synchronous copies ---- */
    vkhost_buffer *buf = NULL;
    size_t len = 0;
    EXPECT(vkhost_buffer_alloc(dev, 0, &buf), VKHOST_INVALID_ARGUMENT);
    EXPECT(vkhost_buffer_alloc(dev, (size_t)1 << 50, &buf), VKHOST_INVALID_ARGUMENT); /* > maxMemoryAllocationSize */
    OK(vkhost_buffer_alloc(dev, span, &buf));
    OK(vkhost_buffer_len(buf, &len));
    CHECK(len == span);
    OK(vkhost_buffer_handle(buf, &vkbuf));
    CHECK(vkbuf != 0);

    vkhost_host_stats before, after, dstats;
    vkhost_copy_path path = VKHOST_PATH_DIRECT;
    fill(m, span, 1);
    OK(vkhost_stats(&before));
    CHECK(before.live_imports >= 2 && before.live_pinned >= 1);
    /* Two registrations and a gap: direct, staged, direct, in one copy. */
    OK(vkhost_copy_to_device(dev, m, span, buf, 0, &path));
    CHECK(path == VKHOST_PATH_MIXED);
    OK(vkhost_stats(&after));
    CHECK(after.direct_bytes - before.direct_bytes == 8 * G);
    CHECK(after.staged_bytes - before.staged_bytes == G);
    unsigned char *back = malloc(span), *want = malloc(span);
    memcpy(want, m, span);
    OK(vkhost_copy_to_host(dev, buf, 0, back, span, &path));
    CHECK(path == VKHOST_PATH_STAGED);
    CHECK(memcmp(back, want, span) == 0);
    memset(m, 0, span);
    OK(vkhost_copy_to_host(dev, buf, 0, m, span, &path));
    CHECK(path == VKHOST_PATH_MIXED);
    CHECK(memcmp(m, want, span) == 0);
    /* Pinned: direct; a NULL path pointer is allowed. */
    fill(pinned, 4 * G, 2);
    OK(vkhost_copy_to_device(dev, pinned, 4 * G, buf, G, &path));
    CHECK(path == VKHOST_PATH_DIRECT);
    OK(vkhost_copy_to_host(dev, buf, G, back, 4 * G, NULL));
    CHECK(memcmp(back, pinned, 4 * G) == 0);
    OK(vkhost_copy_to_device(dev, NULL, 0, buf, 0, NULL));
    EXPECT(vkhost_copy_to_device(dev, m, span + 1, buf, 0, &path), VKHOST_OUT_OF_RANGE);
    EXPECT(vkhost_copy_to_host(dev, buf, 1, back, span, &path), VKHOST_OUT_OF_RANGE);
    EXPECT(vkhost_copy_to_device(dev, NULL, 16, buf, 0, &path), VKHOST_INVALID_ARGUMENT);
    EXPECT(vkhost_copy_to_device(dev, m, 16, NULL, 0, &path), VKHOST_NULL_ARGUMENT);
    OK(vkhost_device_stats(dev, &dstats));
    CHECK(dstats.direct_bytes >= 8 * G && dstats.live_imports == 2 && dstats.live_pinned == 1);
    /* The extensible counters: the same figures and the ones vkhost_host_stats lacks. */
    vkhost_host_counters dc = {.struct_size = sizeof dc};
    OK(vkhost_device_counters(dev, &dc));
    CHECK(dc.struct_size == sizeof dc && dc.direct_bytes == dstats.direct_bytes && dc.staged_bytes == dstats.staged_bytes);
    CHECK(dc.live_imports == 2 && dc.live_pinned == 1 && dc.gathered_bytes == 0 && dc.tombstones == 0);
    OK(vkhost_counters(&dc));
    CHECK(dc.direct_bytes >= dstats.direct_bytes && dc.live_imports >= 2);
    dc.struct_size = sizeof dc - 1; /* short of the first version's fields: refused */
    EXPECT(vkhost_device_counters(dev, &dc), VKHOST_INVALID_ARGUMENT);
    CHECK(dc.struct_size == sizeof dc - 1);
    /* A program built against a later header (a larger struct): this library's fields,
       struct_size saying how many bytes, the appended field untouched. */
    struct {
        vkhost_host_counters c;
        uint64_t appended;
    } later;
    memset(&later, 0xAB, sizeof later);
    later.c.struct_size = sizeof later;
    OK(vkhost_device_counters(dev, &later.c));
    CHECK(later.c.struct_size == sizeof(vkhost_host_counters) && later.appended == 0xABABABABABABABABull);
    CHECK(later.c.live_imports == 2 && later.c.live_pinned == 1 && later.c.direct_bytes == dstats.direct_bytes);

    /* ---- streams and events ---- */
    vkhost_stream *up = NULL, *down = NULL;
    vkhost_event *ev = NULL, *ev2 = NULL;
    bool done = false;
    EXPECT(vkhost_stream_create(dev, 5, &up), VKHOST_INVALID_ARGUMENT);
    OK(vkhost_stream_create(dev, VKHOST_QUEUE_COPY, &up));
    OK(vkhost_stream_create(dev, VKHOST_QUEUE_COMPUTE, &down));
    fill(pinned, 4 * G, 7);
    OK(vkhost_stream_copy_to_device_async(up, pinned, 4 * G, buf, 0));
    OK(vkhost_stream_fill_async(up, buf, 4 * G, G, 0xA5A5A5A5u));
    OK(vkhost_stream_flush(up));
    OK(vkhost_stream_record(up, &ev));
    OK(vkhost_stream_wait_event(down, ev));
    OK(vkhost_stream_copy_buffer_async(down, buf, 0, buf, 5 * G, 4 * G));
    memset(B, 0, 4 * G);
    OK(vkhost_stream_copy_to_host_async(down, buf, 5 * G, B, 4 * G)); /* into registration B */
    memset(back, 0, span);
    OK(vkhost_stream_copy_to_host_async(down, buf, 4 * G, back, G)); /* pageable */
    OK(vkhost_stream_record(down, &ev2));
    OK(vkhost_event_wait(ev2));
    OK(vkhost_event_query(ev2, &done));
    CHECK(done);
    OK(vkhost_stream_synchronize(down));
    CHECK(memcmp(B, pinned, 4 * G) == 0);
    for (size_t i = 0; i < G; i++) CHECK(back[i] == 0xA5);
    EXPECT(vkhost_stream_copy_buffer_async(down, buf, 0, buf, G, 2 * G), VKHOST_INVALID_ARGUMENT);
    EXPECT(vkhost_stream_fill_async(down, buf, 1, 4, 0), VKHOST_INVALID_ARGUMENT);
    EXPECT(vkhost_stream_copy_to_device_async(up, pinned, 4 * G, buf, span - 1), VKHOST_OUT_OF_RANGE);
    EXPECT(vkhost_stream_copy_to_host_async(up, buf, span, back, 1), VKHOST_OUT_OF_RANGE);
    EXPECT(vkhost_stream_record(up, NULL), VKHOST_NULL_ARGUMENT);
    OK(vkhost_event_release(ev2));
    OK(vkhost_stream_destroy(down));

    /* ---- a second vkhost device over the first one's Vulkan handles (borrowed) ---- */
    vkhost_raw_device raw, bad;
    vkhost_device *dev2 = NULL;
    vkhost_buffer *buf2 = NULL;
    OK(vkhost_device_raw(dev, &raw));
    CHECK(raw.instance && raw.physical_device && raw.device && raw.get_instance_proc_addr);
    bad = raw;
    bad.device = NULL;
    EXPECT(vkhost_device_from_vulkan(&bad, 0, NULL, &dev2), VKHOST_INVALID_ARGUMENT);
    bad = raw;
    bad.copy_queue_count = 5;
    EXPECT(vkhost_device_from_vulkan(&bad, 0, NULL, &dev2), VKHOST_INVALID_ARGUMENT);
    /* queues the physical device cannot have: refused, not submitted to (a segfault before) */
    bad = raw;
    bad.compute_family = 99;
    EXPECT(vkhost_device_from_vulkan(&bad, 0, NULL, &dev2), VKHOST_INVALID_ARGUMENT);
    bad = raw;
    bad.compute_queue_index = 1000;
    EXPECT(vkhost_device_from_vulkan(&bad, 0, NULL, &dev2), VKHOST_INVALID_ARGUMENT);
    vkhost_open_options o2;
    OK(vkhost_open_options_default(&o2));
    o2.validation = 0; /* the layer is in the first device's dispatch chain already */
    OK(vkhost_device_from_vulkan(&raw, 0, &o2, &dev2));
    if (dev2) {
        OK(vkhost_buffer_alloc(dev2, G, &buf2));
        fill(back, G, 9);
        OK(vkhost_copy_to_device(dev2, back, G, buf2, 0, &path));
        CHECK(path == VKHOST_PATH_STAGED); /* dev's registrations are not dev2's */
        OK(vkhost_copy_to_host(dev2, buf2, 0, back + G, G, NULL));
        CHECK(memcmp(back, back + G, G) == 0);
        EXPECT(vkhost_copy_to_device(dev, back, G, buf2, 0, &path), VKHOST_INVALID_ARGUMENT);
        OK(vkhost_buffer_free(buf2));
        OK(vkhost_device_destroy(dev2));
        OK(vkhost_device_release(dev2));
    }

    /* ---- the cache of freed pinned blocks: trimmed on demand, whole pages ---- */
    {
        void *c = NULL;
        uint64_t trimmed = 1;
        EXPECT(vkhost_device_trim_pinned_cache(dev, NULL), VKHOST_NULL_ARGUMENT);
        OK(vkhost_alloc_pinned(dev, 100, &c));
        OK(vkhost_free_pinned(dev, c));
        OK(vkhost_device_trim_pinned_cache(dev, &trimmed)); /* 4096 if kept (GPUs), else 0 */
        CHECK(trimmed == 0 || trimmed == 4096);
        OK(vkhost_device_trim_pinned_cache(dev, &trimmed)); /* nothing left to free */
        CHECK(trimmed == 0);
    }

    /* ---- teardown with live children: tombstones ---- */
    OK(vkhost_device_destroy(dev));
    OK(vkhost_device_destroy(dev)); /* idempotent */
    OK(vkhost_device_is_destroyed(dev, &destroyed));
    CHECK(destroyed);
    void *p2 = NULL;
    vkhost_buffer *b2 = NULL;
    vkhost_stream *s2 = NULL;
    EXPECT(vkhost_alloc_pinned(dev, G, &p2), VKHOST_DEVICE_DESTROYED);
    EXPECT(vkhost_register(dev, gap, G), VKHOST_DEVICE_DESTROYED);
    EXPECT(vkhost_buffer_alloc(dev, G, &b2), VKHOST_DEVICE_DESTROYED);
    EXPECT(vkhost_stream_create(dev, VKHOST_QUEUE_COPY, &s2), VKHOST_DEVICE_DESTROYED);
    EXPECT(vkhost_copy_to_device(dev, m, G, buf, 0, &path), VKHOST_DEVICE_DESTROYED);
    EXPECT(vkhost_stream_synchronize(up), VKHOST_DEVICE_DESTROYED);
    EXPECT(vkhost_device_raw(dev, &raw), VKHOST_DEVICE_DESTROYED);
    EXPECT(vkhost_buffer_handle(buf, &vkbuf), VKHOST_DEVICE_DESTROYED); /* the VkBuffer is gone */
    size_t granule2 = 0;
    EXPECT(vkhost_device_registration(dev, &granule2), VKHOST_DEVICE_DESTROYED);
    EXPECT(vkhost_find(dev, A, G, &vkbuf, &off), VKHOST_NOT_REGISTERED);
    /* The destroyed device's entries are tombstones now: two registrations and a block. */
    dc.struct_size = sizeof dc;
    OK(vkhost_device_counters(dev, &dc));
    CHECK(dc.tombstones == 3 && dc.live_imports == 0 && dc.live_pinned == 0);
    OK(vkhost_event_wait(ev));
    OK(vkhost_event_query(ev, &done));
    CHECK(done);
    OK(vkhost_unregister(dev, A)); /* tombstone: once */
    EXPECT(vkhost_unregister(dev, A), VKHOST_NOT_REGISTERED);
    OK(vkhost_unregister(dev, B));
    OK(vkhost_free_pinned(dev, pinned)); /* listed until freed: once */
    EXPECT(vkhost_free_pinned(dev, pinned), VKHOST_NOT_PINNED);
    OK(vkhost_device_stats(dev, &dstats));
    CHECK(dstats.live_imports == 0 && dstats.live_pinned == 0);
    OK(vkhost_event_release(ev));
    OK(vkhost_stream_destroy(up));
    OK(vkhost_buffer_len(buf, &len));
    OK(vkhost_buffer_free(buf));
    uint64_t trimmed_after = 1;
    OK(vkhost_device_trim_pinned_cache(dev, &trimmed_after)); /* the teardown freed the cache */
    CHECK(trimmed_after == 0);
    uint64_t verrs = 99;
    OK(vkhost_device_validation_errors(dev, &verrs));
    CHECK(verrs == 0);
    OK(vkhost_device_release(dev));

    import_never();

    munmap(m, span);
    free(back);
    free(want);

    /* Every status this device can produce was seen. */
    const vkhost_status reachable[] = {
        VKHOST_OK,          VKHOST_NULL_ARGUMENT,        VKHOST_NO_DEVICE,
        VKHOST_DEVICE_DESTROYED, VKHOST_UNSUPPORTED,     VKHOST_INVALID_ARGUMENT, VKHOST_OUT_OF_RANGE,
        VKHOST_NOT_PINNED,  VKHOST_NOT_REGISTERED,       VKHOST_ALREADY_REGISTERED,
    };
    for (size_t i = 0; i < sizeof reachable / sizeof reachable[0]; i++) {
        if (!seen[reachable[i]]) {
            fprintf(stderr, "FAIL: status %s never produced\n", vkhost_status_name(reachable[i]));
            failures++;
        }
    }
    printf("statuses seen:");
    for (int s = 0; s <= VKHOST_INTERNAL; s++)
        if (seen[s]) printf(" %s", vkhost_status_name(s));
    printf("\n");

    uint64_t errors = vkhost_validation_errors();
    if (errors != 0) {
        fprintf(stderr, "FAIL: %llu validation errors\n", (unsigned long long)errors);
        failures++;
    }
    if (failures) {
        fprintf(stderr, "test_capi: %d failure(s)\n", failures);
        return 1;
    }
    printf("test_capi: all passed (validation errors: 0)\n");
    return 0;
}
