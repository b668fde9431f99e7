// vkhost built-in `copy` (u32 words): binding 1 = binding 0, `words` words from each delta.
struct Push {
    delta0: u32,
    delta1: u32,
    words: u32,
}
var<push_constant> pc: Push;
@group(0) @binding(0) var<storage, read> src: array<u32>;
@group(0) @binding(1) var<storage, read_write> dst: array<u32>;

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>) {
    let s = pc.delta0 / 4u;
    let d = pc.delta1 / 4u;
    let stride = groups.x * 256u;
    for (var i = gid.x; i < pc.words; i += stride) {
        dst[d + i] = src[s + i];
    }
}
