// vkhost built-in `fill`: `words` u32 words of binding 0, from its delta, set to `pattern`.
// Push constants follow the vkhost convention: one delta (bytes) per binding, then our own.
struct Push {
    delta0: u32,
    words: u32,
    pattern: u32,
}
var<push_constant> pc: Push;
@group(0) @binding(0) var<storage, read_write> dst: array<u32>;

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>) {
    let base = pc.delta0 / 4u;
    let stride = groups.x * 256u;
    for (var i = gid.x; i < pc.words; i += stride) {
        dst[base + i] = pc.pattern;
    }
}
