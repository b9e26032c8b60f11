// Distance computations per query made by hnswlib's own search (hnswlib 0.8.0 headers), for
// the harness's graph-quality comparison: hnswlib's Python module does not expose them.
//
//   count_hnswlib INDEX QUERIES.f32 DIMS SPACE EF,EF,...   (SPACE: l2 | ip | ip_normalized)
//
// Loads an index saved by hnswlib's Python `save_index` through a space that counts every call
// of the distance function, runs every query at each ef (k = 10), and prints
// {"ef": distances per query, ...} as JSON. `ip_normalized` normalises the queries first, as
// hnswlib's Python "cosine" space does.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "hnswlib/hnswlib.h"

static uint64_t g_count = 0;
static hnswlib::DISTFUNC<float> g_inner = nullptr;

static float counted(const void* a, const void* b, const void* param) {
    ++g_count;
    return g_inner(a, b, param);
}

class CountingSpace : public hnswlib::SpaceInterface<float> {
    hnswlib::SpaceInterface<float>* inner_;

 public:
    explicit CountingSpace(hnswlib::SpaceInterface<float>* inner) : inner_(inner) {
        g_inner = inner->get_dist_func();
    }
    size_t get_data_size() override { return inner_->get_data_size(); }
    hnswlib::DISTFUNC<float> get_dist_func() override { return counted; }
    void* get_dist_func_param() override { return inner_->get_dist_func_param(); }
};

int main(int argc, char** argv) {
    if (argc != 6) {
        std::fprintf(stderr, "usage: %s INDEX QUERIES.f32 DIMS SPACE EFS\n", argv[0]);
        return 2;
    }
    const size_t dims = std::stoul(argv[3]);
    const std::string space = argv[4];
    std::ifstream qf(argv[2], std::ios::binary);
    qf.seekg(0, std::ios::end);
    const size_t bytes = qf.tellg();
    qf.seekg(0);
    std::vector<float> q(bytes / sizeof(float));
    qf.read(reinterpret_cast<char*>(q.data()), bytes);
    const size_t rows = q.size() / dims;
    if (space == "ip_normalized") {
        for (size_t r = 0; r < rows; r++) {
            double n = 0;
            for (size_t i = 0; i < dims; i++) n += double(q[r * dims + i]) * q[r * dims + i];
            const float inv = float(1.0 / (std::sqrt(n) + 1e-30));
            for (size_t i = 0; i < dims; i++) q[r * dims + i] *= inv;
        }
    }
    hnswlib::SpaceInterface<float>* inner;
    if (space == "l2") {
        inner = new hnswlib::L2Space(dims);
    } else {
        inner = new hnswlib::InnerProductSpace(dims);
    }
    CountingSpace counting(inner);
    hnswlib::HierarchicalNSW<float> index(&counting, argv[1]);
    std::stringstream efs(argv[5]);
    std::string item;
    std::printf("{");
    bool first = true;
    while (std::getline(efs, item, ',')) {
        const size_t ef = std::stoul(item);
        index.setEf(ef);
        g_count = 0;
        for (size_t r = 0; r < rows; r++) index.searchKnn(&q[r * dims], 10);
        std::printf("%s\"%zu\": %.1f", first ? "" : ", ", ef, double(g_count) / rows);
        first = false;
    }
    std::printf("}\n");
    delete inner;
    return 0;
}
