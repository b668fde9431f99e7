// vkhost built-in `checksum`: adds the checksum of `words` u32 words of binding 0 (from its
// delta; word i counts as index `first + i`) into the u64 at binding 1's delta, kept as two
// u32 halves (low, high) with the carries propagated. The 64-bit sum of 32-bit terms:
//     checksum = sum over i of fmix32(word[i] ^ (index(i) * 0x9E3779B9)), mod 2^64,
// with fmix32 MurmurHash3's finalizer. `vkhost::kernel::checksum_cpu` is the same function.
struct Push {
    delta0: u32,
    delta1: u32,
    words: u32,
    first: u32,
}
var<push_constant> pc: Push;
@group(0) @binding(0) var<storage, read> src: array<u32>;
@group(0) @binding(1) var<storage, read_write> sum: array<atomic<u32>>;

var<workgroup> lo_w: array<u32, 256>;
var<workgroup> hi_w: array<u32, 256>;

fn fmix32(x0: u32) -> u32 {
    var x = x0;
    x ^= x >> 16u;
    x *= 0x85ebca6bu;
    x ^= x >> 13u;
    x *= 0xc2b2ae35u;
    x ^= x >> 16u;
    return x;
}

// One step of the workgroup tree: slot `lid` += slot `lid + w`, as (hi, lo) with carry.
fn fold(lid: u32, w: u32) {
    if lid < w {
        let a = lo_w[lid];
        let s = a + lo_w[lid + w];
        hi_w[lid] = hi_w[lid] + hi_w[lid + w] + select(0u, 1u, s < a);
        lo_w[lid] = s;
    }
}

@compute @workgroup_size(256)
fn main(
    @builtin(global_invocation_id) gid: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
    @builtin(num_workgroups) groups: vec3<u32>,
) {
    let base = pc.delta0 / 4u;
    let stride = groups.x * 256u;
    var lo = 0u;
    var hi = 0u;
    for (var i = gid.x; i < pc.words; i += stride) {
        let t = fmix32(src[base + i] ^ ((pc.first + i) * 0x9e3779b9u));
        let s = lo + t;
        hi += select(0u, 1u, s < t);
        lo = s;
    }
    lo_w[lid] = lo;
    hi_w[lid] = hi;
    workgroupBarrier();
    fold(lid, 128u);
    workgroupBarrier();
    fold(lid, 64u);
    workgroupBarrier();
    fold(lid, 32u);
    workgroupBarrier();
    fold(lid, 16u);
    workgroupBarrier();
    fold(lid, 8u);
    workgroupBarrier();
    fold(lid, 4u);
    workgroupBarrier();
    fold(lid, 2u);
    workgroupBarrier();
    fold(lid, 1u);
    if lid == 0u {
        let o = pc.delta1 / 4u;
        let old = atomicAdd(&sum[o], lo_w[0]);
        let carry = select(0u, 1u, old + lo_w[0] < old);
        atomicAdd(&sum[o + 1u], hi_w[0] + carry);
    }
}
