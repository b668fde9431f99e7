// vkhost built-in `copy`, 16-byte vectors: used when both deltas and the length are multiples
// of 16. `vecs` vec4<u32> from each delta.
struct Push {
    delta0: u32,
    delta1: u32,
    vecs: u32,
}
var<push_constant> pc: Push;
@group(0) @binding(0) var<storage, read> src: array<vec4<u32>>;
@group(0) @binding(1) var<storage, read_write> dst: array<vec4<u32>>;

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>) {
    let s = pc.delta0 / 16u;
    let d = pc.delta1 / 16u;
    let stride = groups.x * 256u;
    for (var i = gid.x; i < pc.vecs; i += stride) {
        dst[d + i] = src[s + i];
    }
}
