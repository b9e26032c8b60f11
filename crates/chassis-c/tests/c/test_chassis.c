/* The C API end to end: create, add, search, flush, errors, a reader in a forked process that
 * sees the parent's flush, compaction, close, metadata and filters, get, contains and info,
 * format 3, migration from hnswlib. Run by tests/c_program.rs (plain and under valgrind).
 * Usage: test_chassis DIR HNSWLIB_FILE */
#include "chassis.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define DIMS 8
#define N 200

static int failures = 0;

#define CHECK(cond, ...)                                                                  \
    do {                                                                                  \
        if (!(cond)) {                                                                    \
            fprintf(stderr, "FAILED %s:%d: %s: ", __FILE__, __LINE__, #cond);             \
            fprintf(stderr, __VA_ARGS__);                                                 \
            fprintf(stderr, " (last error: %s)\n", chassis_last_error_message());         \
            failures++;                                                                   \
        }                                                                                 \
    } while (0)

static void vector(int i, float *v) {
    for (int d = 0; d < DIMS; d++) {
        v[d] = sinf((float)(i * (d + 3))) + (float)(i % 7) * 0.1f + (float)d * 0.01f;
    }
}

static int near(const float *a, const float *b) {
    for (int d = 0; d < DIMS; d++) {
        if (fabsf(a[d] - b[d]) > 1e-6f) return 0;
    }
    return 1;
}

static int reader_child(const char *path) {
    chassis_reader *r = NULL;
    if (chassis_open_reader(path, &r) != CHASSIS_STATUS_OK) {
        fprintf(stderr, "child: open_reader: %s\n", chassis_last_error_message());
        return 1;
    }
    uint64_t len = 0;
    /* Wait (up to 60 s) for the parent's second flush. */
    for (int tries = 0; tries < 60000 && len < 2 * N; tries++) {
        if (chassis_reader_len(r, &len) != CHASSIS_STATUS_OK) return 2;
        if (len < 2 * N) usleep(1000);
    }
    if (len != 2 * N) {
        fprintf(stderr, "child: saw %llu vectors\n", (unsigned long long)len);
        return 3;
    }
    float q[DIMS];
    uint64_t ids[5];
    float dist[5];
    size_t found = 0;
    vector(N + 17, q);
    if (chassis_reader_search(r, q, DIMS, 5, 64, ids, dist, &found) != CHASSIS_STATUS_OK) return 4;
    int ok = found == 5 && ids[0] == N + 17 && dist[0] < 1e-5f;
    chassis_reader_close(r);
    return ok ? 0 : 5;
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: test_chassis DIR HNSWLIB_FILE\n");
        return 2;
    }
    const char *dir = argv[1], *hnswlib_file = argv[2];
    char path[4096];
    snprintf(path, sizeof path, "%s/c.chassis", argv[1]);
    CHECK(strlen(chassis_version()) > 0, "version");
    /* Small files lock nothing, whatever the limit. */
    chassis_set_resident_limit(0);
    CHECK(chassis_resident_bytes() == 0, "nothing locked");
    chassis_set_resident_limit(UINT64_MAX);

    chassis_index *ix = NULL;
    CHECK(chassis_create(path, 0, CHASSIS_METRIC_COSINE, 0, 0, &ix) == CHASSIS_STATUS_INVALID_ARGUMENT,
          "dims 0");
    CHECK(strstr(chassis_last_error_message(), "dims") != NULL, "message names dims");
    CHECK(chassis_create(NULL, 8, CHASSIS_METRIC_COSINE, 0, 0, &ix) == CHASSIS_STATUS_NULL_POINTER,
          "null path");
    CHECK(chassis_create(path, DIMS, CHASSIS_METRIC_COSINE, 12, 100, &ix) == CHASSIS_STATUS_OK,
          "create");

    float v[DIMS];
    for (int i = 0; i < N; i++) {
        uint64_t id = 99;
        vector(i, v);
        CHECK(chassis_add(ix, v, DIMS, &id) == CHASSIS_STATUS_OK && id == (uint64_t)i, "add %d", i);
    }
    CHECK(chassis_add(ix, v, DIMS - 1, NULL) == CHASSIS_STATUS_DIMENSION_MISMATCH, "dims");
    v[3] = NAN;
    CHECK(chassis_add(ix, v, DIMS, NULL) == CHASSIS_STATUS_INVALID_VECTOR, "NaN");
    vector(1, v);
    CHECK(chassis_add_with_id(ix, 5, v, DIMS) == CHASSIS_STATUS_DUPLICATE_ID, "duplicate");
    CHECK(chassis_delete(ix, 123456) == CHASSIS_STATUS_NOT_FOUND, "not found");
    CHECK(chassis_flush(ix) == CHASSIS_STATUS_OK, "flush");

    chassis_index *second = NULL;
    CHECK(chassis_open(path, &second) == CHASSIS_STATUS_LOCKED, "second writer");
    CHECK(strlen(chassis_last_error_message()) > 0, "locked message");

    uint64_t ids[10];
    float dist[10];
    size_t found = 0;
    vector(42, v);
    CHECK(chassis_search(ix, v, DIMS, 10, 64, ids, dist, &found) == CHASSIS_STATUS_OK, "search");
    CHECK(found == 10 && ids[0] == 42 && dist[0] < 1e-5f, "self found: %llu", (unsigned long long)ids[0]);
    CHECK(chassis_search(ix, v, DIMS, 3, 64, ids, NULL, &found) == CHASSIS_STATUS_OK && found == 3,
          "distances may be null");

    /* A batch answers as its queries one at a time; bad arguments write nothing. */
    static float qs[4 * DIMS];
    for (int i = 0; i < 4; i++) {
        vector(10 * i + 3, qs + i * DIMS);
    }
    uint64_t many_ids[4 * 5];
    float many_dist[4 * 5];
    size_t many_found[4] = {99, 99, 99, 99};
    CHECK(chassis_search_many(ix, qs, 4, DIMS, 5, 64, many_ids, many_dist, many_found) == CHASSIS_STATUS_OK,
          "search many");
    for (int i = 0; i < 4; i++) {
        CHECK(chassis_search(ix, qs + i * DIMS, DIMS, 5, 64, ids, dist, &found) == CHASSIS_STATUS_OK &&
                  found == 5 && many_found[i] == 5,
              "row %d found %zu", i, many_found[i]);
        CHECK(memcmp(ids, many_ids + 5 * i, 5 * sizeof(uint64_t)) == 0 &&
                  memcmp(dist, many_dist + 5 * i, 5 * sizeof(float)) == 0 && ids[0] == (uint64_t)(10 * i + 3),
              "row %d as one query", i);
    }
    many_found[0] = 99;
    CHECK(chassis_search_many(ix, qs, 4, DIMS - 1, 5, 64, many_ids, many_dist, many_found) ==
              CHASSIS_STATUS_DIMENSION_MISMATCH && many_found[0] == 99,
          "batch dims");
    CHECK(chassis_search_many(ix, qs, 4, DIMS, 0, 64, many_ids, many_dist, many_found) ==
              CHASSIS_STATUS_INVALID_ARGUMENT,
          "batch k 0");
    CHECK(chassis_search_many(ix, NULL, 0, DIMS, 5, 64, NULL, NULL, NULL) == CHASSIS_STATUS_OK, "empty batch");
    CHECK(chassis_search_many(ix, qs, 2, DIMS, 5, 64, many_ids, NULL, many_found) == CHASSIS_STATUS_OK &&
              many_found[1] == 5 && many_ids[5] == 13,
          "batch distances may be null");
    CHECK(chassis_search_many(ix, qs, 2, DIMS, 5, 64, NULL, NULL, many_found) == CHASSIS_STATUS_NULL_POINTER,
          "batch ids null");

    /* A reader in a forked process sees the parent's next flush. */
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        _exit(reader_child(path));
    }
    /* The second N in one batch, linked on two threads. */
    static float rows[N * DIMS];
    static uint64_t batch_ids[N];
    for (int i = 0; i < N; i++) {
        vector(N + i, rows + i * DIMS);
    }
    CHECK(chassis_add_batch(ix, rows, N, DIMS - 1, NULL, 2, batch_ids) == CHASSIS_STATUS_DIMENSION_MISMATCH,
          "batch dims");
    uint64_t taken[2] = {7, 900000};
    CHECK(chassis_add_batch(ix, rows, 2, DIMS, taken, 2, NULL) == CHASSIS_STATUS_DUPLICATE_ID,
          "batch with a live id adds nothing");
    CHECK(chassis_add_batch(ix, rows, N, DIMS, NULL, 2, batch_ids) == CHASSIS_STATUS_OK, "batch");
    CHECK(batch_ids[0] == N && batch_ids[N - 1] == 2 * N - 1, "batch ids %llu",
          (unsigned long long)batch_ids[0]);
    CHECK(chassis_flush(ix) == CHASSIS_STATUS_OK, "second flush");
    int status = 0;
    waitpid(pid, &status, 0);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "reader child exited %d", WEXITSTATUS(status));

    /* Delete, compact, and a reader that follows the compaction. */
    chassis_reader *r = NULL;
    CHECK(chassis_open_reader(path, &r) == CHASSIS_STATUS_OK, "reader");
    for (uint64_t id = 0; id < 100; id++) {
        CHECK(chassis_delete(ix, id) == CHASSIS_STATUS_OK, "delete %llu", (unsigned long long)id);
    }
    CHECK(chassis_compact_keep_graph(ix, CHASSIS_CODES_KEEP) == CHASSIS_STATUS_INVALID_ARGUMENT,
          "keep_graph refuses deleted vectors");
    CHECK(chassis_compact(ix, 16, 0) == CHASSIS_STATUS_OK, "compact");
    vector(150, v);
    CHECK(chassis_search(ix, v, DIMS, 5, 64, ids, dist, &found) == CHASSIS_STATUS_OK, "search before keep_graph");
    uint64_t kept_ids[5];
    float kept_dist[5];
    size_t kept_found = found;
    memcpy(kept_ids, ids, sizeof kept_ids);
    memcpy(kept_dist, dist, sizeof kept_dist);
    CHECK(chassis_compact_keep_graph(ix, CHASSIS_CODES_KEEP) == CHASSIS_STATUS_OK, "compact keeping the graph");
    CHECK(chassis_search(ix, v, DIMS, 5, 64, ids, dist, &found) == CHASSIS_STATUS_OK && found == kept_found &&
              memcmp(ids, kept_ids, found * sizeof(uint64_t)) == 0 &&
              memcmp(dist, kept_dist, found * sizeof(float)) == 0,
          "the kept graph answers as before");
    uint64_t len = 0;
    CHECK(chassis_len(ix, &len) == CHASSIS_STATUS_OK && len == 2 * N - 100, "len %llu", (unsigned long long)len);
    CHECK(chassis_reader_len(r, &len) == CHASSIS_STATUS_OK && len == 2 * N - 100, "reader len");
    vector(150, v);
    CHECK(chassis_reader_search(r, v, DIMS, 1, 64, ids, dist, &found) == CHASSIS_STATUS_OK &&
              found == 1 && ids[0] == 150,
          "reader after compaction");
    size_t reader_found[4];
    CHECK(chassis_reader_search_many(r, qs, 4, DIMS, 5, 64, many_ids, many_dist, reader_found) == CHASSIS_STATUS_OK,
          "reader search many");
    for (int i = 0; i < 4; i++) {
        CHECK(chassis_reader_search(r, qs + i * DIMS, DIMS, 5, 64, ids, dist, &found) == CHASSIS_STATUS_OK &&
                  found == reader_found[i] && memcmp(ids, many_ids + 5 * i, found * sizeof(uint64_t)) == 0 &&
                  memcmp(dist, many_dist + 5 * i, found * sizeof(float)) == 0,
              "reader row %d as one query", i);
    }

    /* Online backup: a full copy, then nothing new; from the reader too. */
    char copy_path[4096];
    snprintf(copy_path, sizeof copy_path, "%s/backup.chassis", dir);
    chassis_backup_report br;
    CHECK(chassis_backup(ix, copy_path, &br) == CHASSIS_STATUS_OK && br.full_copy &&
              br.live == 2 * N - 100 && br.bytes_shipped > 0,
          "backup");
    CHECK(chassis_reader_backup(r, copy_path, &br) == CHASSIS_STATUS_OK && br.unchanged &&
              br.bytes_shipped == 0,
          "backup again: unchanged");
    CHECK(chassis_backup(ix, path, NULL) == CHASSIS_STATUS_INVALID_ARGUMENT, "backup onto itself");
    chassis_reader *copy = NULL;
    CHECK(chassis_open_reader(copy_path, &copy) == CHASSIS_STATUS_OK &&
              chassis_reader_len(copy, &len) == CHASSIS_STATUS_OK && len == 2 * N - 100,
          "backup opens");
    chassis_reader_close(copy);
    chassis_reader_close(r);
    chassis_close(ix);
    chassis_close(NULL);
    chassis_reader_close(NULL);

    /* Reopen: the flushed state is there. */
    CHECK(chassis_open(path, &ix) == CHASSIS_STATUS_OK, "reopen");
    CHECK(chassis_len(ix, &len) == CHASSIS_STATUS_OK && len == 2 * N - 100, "len after reopen");

    /* The user version, committed with the data; rollback; an absurd k; the file identity. */
    uint64_t uv = 1;
    CHECK(chassis_user_version(ix, &uv) == CHASSIS_STATUS_OK && uv == 0, "no user version yet");
    CHECK(chassis_set_user_version(ix, 77) == CHASSIS_STATUS_OK, "set user version");
    CHECK(chassis_flush(ix) == CHASSIS_STATUS_OK, "flush the user version");
    chassis_reader *uvr = NULL;
    CHECK(chassis_open_reader(path, &uvr) == CHASSIS_STATUS_OK &&
              chassis_reader_user_version(uvr, &uv) == CHASSIS_STATUS_OK && uv == 77,
          "a reader sees the flushed user version");
    vector(9999, v);
    CHECK(chassis_add_with_id(ix, 555555, v, DIMS) == CHASSIS_STATUS_OK, "add before rollback");
    CHECK(chassis_set_user_version(ix, 78) == CHASSIS_STATUS_OK, "set before rollback");
    CHECK(chassis_rollback(ix) == CHASSIS_STATUS_OK, "rollback");
    bool has = true;
    CHECK(chassis_contains(ix, 555555, &has) == CHASSIS_STATUS_OK && !has, "rolled back add is gone");
    CHECK(chassis_user_version(ix, &uv) == CHASSIS_STATUS_OK && uv == 77, "rolled back version");
    CHECK(chassis_len(ix, &len) == CHASSIS_STATUS_OK && len == 2 * N - 100, "len after rollback");
    /* k far past the live count: clamped, never sized by the argument. */
    uint64_t all_ids[2 * N];
    CHECK(chassis_search(ix, v, DIMS, SIZE_MAX, SIZE_MAX, all_ids, NULL, &found) == CHASSIS_STATUS_OK &&
              found == 2 * N - 100,
          "k = SIZE_MAX answers every live vector: %zu", found);
    CHECK(chassis_reader_search(uvr, v, DIMS, (size_t)100000000000ULL, 0, all_ids, NULL, &found) ==
                  CHASSIS_STATUS_OK && found == 2 * N - 100,
          "reader: k = 10^11");
    chassis_reader_close(uvr);
    char file_id[33];
    size_t id_len = 0;
    CHECK(chassis_file_id(ix, file_id, sizeof file_id, &id_len) == CHASSIS_STATUS_OK && id_len == 32 &&
              strlen(file_id) == 32,
          "file identity");
    CHECK(chassis_file_id(ix, file_id, 8, &id_len) == CHASSIS_STATUS_BUFFER_TOO_SMALL && id_len == 32,
          "file identity, short buffer");

    /* Metadata and filtered search, as JSON text. */
    char doc[64];
    for (int i = 0; i < 50; i++) {
        uint64_t id = 5000 + (uint64_t)i, got = 0;
        snprintf(doc, sizeof doc, "{\"tenant\": \"%s\", \"n\": %d}", i % 2 ? "acme" : "globex", i);
        vector(1000 + i, v);
        CHECK(chassis_add_with_metadata(ix, &id, v, DIMS, doc, &got) == CHASSIS_STATUS_OK && got == id,
              "add with metadata %d", i);
    }
    uint64_t assigned = 0;
    vector(2000, v);
    CHECK(chassis_add_with_metadata(ix, NULL, v, DIMS, NULL, &assigned) == CHASSIS_STATUS_OK,
          "add without metadata");
    CHECK(chassis_add_with_metadata(ix, NULL, v, DIMS, "{\"$bad\": 1}", NULL) ==
              CHASSIS_STATUS_INVALID_ARGUMENT,
          "bad metadata");
    vector(1000 + 7, v);
    CHECK(chassis_search_filtered(ix, v, DIMS, 10, 64, "{\"tenant\": \"acme\", \"n\": {\"$lt\": 20}}",
                                  ids, dist, &found) == CHASSIS_STATUS_OK && found == 10 && ids[0] == 5007,
          "filtered search: %zu found, first %llu", found, (unsigned long long)ids[0]);
    for (size_t i = 0; i < found; i++) {
        CHECK(ids[i] >= 5000 && ids[i] < 5020 && ids[i] % 2 == 1, "hit %llu passes", (unsigned long long)ids[i]);
    }
    CHECK(chassis_search_filtered(ix, v, DIMS, 10, 64, "{\"n\": {\"$foo\": 1}}", ids, dist, &found) ==
              CHASSIS_STATUS_INVALID_ARGUMENT,
          "malformed filter");
    CHECK(strstr(chassis_last_error_message(), "$foo") != NULL, "the message names the operator");
    size_t need = 0;
    char small[4];
    CHECK(chassis_get_metadata(ix, 5003, small, sizeof small, &need) == CHASSIS_STATUS_BUFFER_TOO_SMALL &&
              need == strlen("{\"n\":3,\"tenant\":\"acme\"}"),
          "too small: need %zu", need);
    char *text = malloc(need + 1);
    CHECK(chassis_get_metadata(ix, 5003, text, need + 1, &need) == CHASSIS_STATUS_OK &&
              strcmp(text, "{\"n\":3,\"tenant\":\"acme\"}") == 0,
          "metadata: %s", text);
    free(text);
    CHECK(chassis_get_metadata(ix, 999999, doc, sizeof doc, &need) == CHASSIS_STATUS_NOT_FOUND, "not found");
    CHECK(chassis_set_metadata(ix, 5003, "{\"tenant\": \"moved\"}") == CHASSIS_STATUS_OK, "set metadata");
    CHECK(chassis_flush(ix) == CHASSIS_STATUS_OK, "flush metadata");
    CHECK(chassis_open_reader(path, &r) == CHASSIS_STATUS_OK, "reader for metadata");
    CHECK(chassis_reader_get_metadata(r, 5003, doc, sizeof doc, &need) == CHASSIS_STATUS_OK &&
              strcmp(doc, "{\"tenant\":\"moved\"}") == 0,
          "reader metadata: %s", doc);
    vector(1000 + 3, v);
    CHECK(chassis_reader_search_filtered(r, v, DIMS, 5, 64, "{\"tenant\": \"moved\"}", ids, dist, &found) ==
                  CHASSIS_STATUS_OK && found == 1 && ids[0] == 5003,
          "reader filtered search");
    chassis_reader_close(r);

    /* Full-text and hybrid search over the documents' "tenant" and "text" fields. */
    char tbuf[256];
    size_t tlen = 0;
    CHECK(chassis_search_text(ix, "acme", 5, NULL, ids, dist, &found) == CHASSIS_STATUS_INVALID_ARGUMENT,
          "no text fields yet");
    CHECK(chassis_set_text_fields(ix, "[\"tenant\", {\"name\": \"text\", \"stem\": true}]") ==
              CHASSIS_STATUS_OK,
          "set text fields");
    CHECK(chassis_set_text_fields(ix, "[{\"name\": \"x\", \"boost\": 2}]") == CHASSIS_STATUS_INVALID_ARGUMENT,
          "unknown field option");
    CHECK(chassis_text_fields(ix, tbuf, sizeof tbuf, &tlen) == CHASSIS_STATUS_OK &&
              strstr(tbuf, "\"name\":\"tenant\"") != NULL && strstr(tbuf, "\"stem\":true") != NULL,
          "text fields: %s", tbuf);
    vector(3000, v);
    uint64_t parser_id = 7000;
    CHECK(chassis_add_with_metadata(ix, &parser_id, v, DIMS, "{\"text\": \"fast parsers parsing files\"}",
                                    NULL) == CHASSIS_STATUS_OK,
          "add a text document");
    float scores[10];
    CHECK(chassis_search_text(ix, "parse", 5, NULL, ids, scores, &found) == CHASSIS_STATUS_OK && found == 1 &&
              ids[0] == 7000 && scores[0] > 0.0f,
          "text search (stemmed): %zu found", found);
    uint64_t tids[64];
    float tscores[64];
    CHECK(chassis_search_text(ix, "acme", 64, NULL, tids, tscores, &found) == CHASSIS_STATUS_OK && found == 24,
          "text search over a field: %zu found", found);
    CHECK(chassis_search_text(ix, "acme", 64, "{\"n\": {\"$lt\": 10}}", tids, tscores, &found) ==
                  CHASSIS_STATUS_OK && found == 4,
          "filtered text search (5003 moved to another tenant): %zu found", found);
    CHECK(chassis_flush(ix) == CHASSIS_STATUS_OK, "flush text");
    uint32_t vranks[5], tranks[5];
    float vdist[5], tlegs[5];
    chassis_hybrid_legs legs = {vranks, vdist, tranks, tlegs};
    vector(1000 + 9, v);
    CHECK(chassis_search_hybrid(ix, v, DIMS, "acme", 5, 64, NULL, ids, scores, &legs, &found) ==
                  CHASSIS_STATUS_OK && found == 5 && ids[0] == 5009 && vranks[0] == 1 && tranks[0] > 0,
          "hybrid: first %llu, vector rank %u, text rank %u", (unsigned long long)ids[0], vranks[0], tranks[0]);
    CHECK(chassis_search_hybrid(ix, v, DIMS, "acme", 5, 64,
                                "{\"fusion\": \"relative_score\", \"weights\": [0.2, 0.8], \"depth\": 20, "
                                "\"filter\": {\"n\": {\"$gte\": 30}}}",
                                ids, scores, NULL, &found) == CHASSIS_STATUS_OK && found == 5,
          "hybrid with options");
    for (size_t i = 0; i < found; i++) {
        CHECK(ids[i] >= 5030 && ids[i] < 5050, "hybrid hit %llu passes the filter", (unsigned long long)ids[i]);
    }
    CHECK(chassis_search_hybrid(ix, v, DIMS, "acme", 5, 64, "{\"fusion\": \"max\"}", ids, scores, NULL,
                                &found) == CHASSIS_STATUS_INVALID_ARGUMENT,
          "unknown fusion");
    CHECK(chassis_open_reader(path, &r) == CHASSIS_STATUS_OK, "reader for text");
    CHECK(chassis_reader_search_text(r, "parsing", 5, NULL, ids, NULL, &found) == CHASSIS_STATUS_OK &&
              found == 1 && ids[0] == 7000,
          "reader text search");
    CHECK(chassis_reader_search_hybrid(r, v, DIMS, "acme", 3, 64, NULL, ids, scores, NULL, &found) ==
                  CHASSIS_STATUS_OK && found == 3 && ids[0] == 5009,
          "reader hybrid search");
    chassis_reader_close(r);
    chassis_close(ix);

    /* get, contains and info, on the writer and on a reader. */
    CHECK(chassis_open(path, &ix) == CHASSIS_STATUS_OK, "reopen for get");
    CHECK(chassis_open_reader(path, &r) == CHASSIS_STATUS_OK, "reader for get");
    /* Cosine: stored at unit length. */
    float got_v[DIMS], want_v[DIMS], norm = 0.0f;
    vector(150, want_v);
    for (int d = 0; d < DIMS; d++) norm += want_v[d] * want_v[d];
    for (int d = 0; d < DIMS; d++) want_v[d] /= sqrtf(norm);
    CHECK(chassis_get(ix, 150, got_v, DIMS) == CHASSIS_STATUS_OK && near(got_v, want_v),
          "get 150: %f %f vs %f %f", got_v[0], got_v[1], want_v[0], want_v[1]);
    CHECK(chassis_reader_get(r, 150, got_v, DIMS) == CHASSIS_STATUS_OK && near(got_v, want_v),
          "reader get 150");
    CHECK(chassis_get(ix, 150, got_v, DIMS - 1) == CHASSIS_STATUS_DIMENSION_MISMATCH, "get with short buffer");
    CHECK(chassis_get(ix, 5, got_v, DIMS) == CHASSIS_STATUS_NOT_FOUND, "get deleted");
    CHECK(chassis_reader_get(r, 999999, got_v, DIMS) == CHASSIS_STATUS_NOT_FOUND, "reader get unknown");
    bool live = false;
    CHECK(chassis_contains(ix, 150, &live) == CHASSIS_STATUS_OK && live, "contains 150");
    CHECK(chassis_contains(ix, 5, &live) == CHASSIS_STATUS_OK && !live, "deleted not contained");
    CHECK(chassis_reader_contains(r, 5003, &live) == CHASSIS_STATUS_OK && live, "reader contains");
    CHECK(chassis_reader_contains(r, 5, &live) == CHASSIS_STATUS_OK && !live, "reader: deleted");
    CHECK(chassis_delete(ix, 150) == CHASSIS_STATUS_OK, "delete 150");
    CHECK(chassis_contains(ix, 150, &live) == CHASSIS_STATUS_OK && !live, "the writer sees its delete");
    CHECK(chassis_reader_contains(r, 150, &live) == CHASSIS_STATUS_OK && live, "a reader sees the last flush");
    chassis_index_info info;
    CHECK(chassis_info(ix, &info) == CHASSIS_STATUS_OK, "info");
    /* 51 documents added with metadata and one with text, one deleted. */
    CHECK(info.count == 2 * N - 100 + 51 + 1 - 1 && info.dims == DIMS && info.metric == CHASSIS_METRIC_COSINE &&
              info.m == 16 && info.ef_construction == 100 && info.format == CHASSIS_FORMAT_PLANAR && !info.read_only,
          "info: count %llu dims %zu m %zu ef %zu format %u metric %d ro %d", (unsigned long long)info.count,
          info.dims, info.m, info.ef_construction, info.format, (int)info.metric, (int)info.read_only);
    CHECK(info.read_version >= 4 && info.write_version >= info.read_version, "versions %u %u",
          info.read_version, info.write_version);
    chassis_index_info rinfo;
    CHECK(chassis_reader_info(r, &rinfo) == CHASSIS_STATUS_OK && rinfo.count == info.count + 1 &&
              rinfo.dims == DIMS && rinfo.format == CHASSIS_FORMAT_PLANAR && rinfo.read_only && rinfo.m == 16 &&
              rinfo.committed_count == info.committed_count,
          "reader info: count %llu", (unsigned long long)rinfo.count);
    CHECK(chassis_info(ix, NULL) == CHASSIS_STATUS_NULL_POINTER, "info into null");
    chassis_reader_close(r);
    chassis_close(ix);

    /* Format 3 on request; other formats are refused. */
    char path3[4096];
    snprintf(path3, sizeof path3, "%s/f3.chassis", dir);
    CHECK(chassis_create_format(path3, DIMS, CHASSIS_METRIC_COSINE, 8, 50, 3, &ix) == CHASSIS_STATUS_OK,
          "create format 3");
    vector(1, v);
    CHECK(chassis_add(ix, v, DIMS, NULL) == CHASSIS_STATUS_OK && chassis_flush(ix) == CHASSIS_STATUS_OK,
          "add to format 3");
    CHECK(chassis_info(ix, &info) == CHASSIS_STATUS_OK && info.format == 3 && info.read_version == 3 &&
              info.metric == CHASSIS_METRIC_COSINE && info.m == 8 && info.ef_construction == 50,
          "format 3 info: format %u read %u", info.format, info.read_version);
    chassis_close(ix);
    snprintf(path3, sizeof path3, "%s/f7.chassis", dir);
    CHECK(chassis_create_format(path3, DIMS, CHASSIS_METRIC_L2, 0, 0, 7, &ix) == CHASSIS_STATUS_INVALID_ARGUMENT,
          "format 7 refused");
    /* Format 4 on request: split halves side by side, for releases before format 6. */
    snprintf(path3, sizeof path3, "%s/f4.chassis", dir);
    CHECK(chassis_create_format(path3, DIMS, CHASSIS_METRIC_L2, 0, 0, CHASSIS_FORMAT_SPLIT, &ix) ==
              CHASSIS_STATUS_OK,
          "create format 4");
    CHECK(chassis_info(ix, &info) == CHASSIS_STATUS_OK && info.format == CHASSIS_FORMAT_SPLIT &&
              info.read_version == 4,
          "format 4: format %u read version %u", info.format, info.read_version);
    chassis_close(ix);

    /* Int8 codes: chosen at create, trained at 1,000 vectors, exact distances, by compaction. */
    {
        enum { CN = 1200 };
        static float crows[CN * DIMS];
        for (int i = 0; i < CN; i++) vector(i + 7, crows + i * DIMS);
        snprintf(path3, sizeof path3, "%s/codes.chassis", dir);
        CHECK(chassis_create_codes(path3, DIMS, CHASSIS_METRIC_L2, 0, 0, 4, CHASSIS_CODES_INT8, &ix) ==
                  CHASSIS_STATUS_OK,
              "create with codes");
        CHECK(chassis_add_batch(ix, crows, CN, DIMS, NULL, 2, NULL) == CHASSIS_STATUS_OK &&
                  chassis_flush(ix) == CHASSIS_STATUS_OK,
              "add with codes");
        CHECK(chassis_info(ix, &info) == CHASSIS_STATUS_OK && info.write_version == 6 && info.read_version == 4,
              "codes raise the write version: %u", info.write_version);
        CHECK(chassis_search(ix, crows + 40 * DIMS, DIMS, 3, 64, ids, dist, &found) == CHASSIS_STATUS_OK &&
                  found == 3 && ids[0] == 40 && dist[0] == 0.0f,
              "a coded vector finds itself at exact distance 0");
        CHECK(chassis_compact_codes(ix, 0, 0, CHASSIS_CODES_NONE) == CHASSIS_STATUS_OK &&
                  chassis_info(ix, &info) == CHASSIS_STATUS_OK && info.write_version == 4,
              "compaction drops codes: write version %u", info.write_version);
        CHECK(chassis_compact_codes(ix, 0, 0, CHASSIS_CODES_INT4) == CHASSIS_STATUS_OK &&
                  chassis_info(ix, &info) == CHASSIS_STATUS_OK && info.write_version == 7,
              "compaction adds int4 codes: write version %u", info.write_version);
        CHECK(chassis_search(ix, crows + 40 * DIMS, DIMS, 3, 64, ids, dist, &found) == CHASSIS_STATUS_OK &&
                  found == 3 && ids[0] == 40 && dist[0] == 0.0f,
              "an int4-coded vector finds itself at exact distance 0");
        CHECK(chassis_compact_codes(ix, 0, 0, 7) == CHASSIS_STATUS_INVALID_ARGUMENT, "unknown codes refused");
        chassis_close(ix);
        snprintf(path3, sizeof path3, "%s/codes2.chassis", dir);
        CHECK(chassis_create_codes(path3, DIMS, CHASSIS_METRIC_L2, 0, 0, 4, 9, &ix) ==
                  CHASSIS_STATUS_INVALID_ARGUMENT,
              "codes 9 refused");
    }

    /* Migration from an hnswlib file (the Rust tests' fixture: 600 x 16, ten deleted). */
    {
        char dst[4096];
        snprintf(dst, sizeof dst, "%s/migrated.chassis", dir);
        CHECK(chassis_migrate_hnswlib(hnswlib_file, dst, CHASSIS_METRIC_L2, &ix) == CHASSIS_STATUS_OK,
              "migrate");
        CHECK(chassis_info(ix, &info) == CHASSIS_STATUS_OK && info.count == 590 && info.dims == 16 &&
                  info.m == 8,
              "migrated info: count %llu", (unsigned long long)info.count);
        CHECK(chassis_contains(ix, 1000, &live) == CHASSIS_STATUS_OK && live, "label 1000");
        CHECK(chassis_contains(ix, 1015, &live) == CHASSIS_STATUS_OK && !live, "deleted label 1015");
        float m16[16];
        CHECK(chassis_get(ix, 1003, m16, 16) == CHASSIS_STATUS_OK, "get migrated");
        CHECK(chassis_search(ix, m16, 16, 1, 64, ids, dist, &found) == CHASSIS_STATUS_OK && found == 1 &&
                  ids[0] == 1003 && dist[0] == 0.0f,
              "migrated vector finds itself");
        chassis_close(ix);
        CHECK(chassis_migrate_hnswlib(hnswlib_file, dst, CHASSIS_METRIC_L2, &ix) == CHASSIS_STATUS_IO &&
                  strstr(chassis_last_error_message(), "exists") != NULL,
              "migrate refuses an existing destination");
    }

    /* Half precision (format 5): values rounded to the nearest half, a value out of range
     * refused, distances exact to the stored values. */
    {
        char hpath[4096];
        snprintf(hpath, sizeof hpath, "%s/half.chassis", dir);
        chassis_index *h = NULL;
        CHECK(chassis_create_codes(hpath, 4, CHASSIS_METRIC_L2, 8, 32, CHASSIS_FORMAT_F16, CHASSIS_CODES_NONE,
                                   &h) == CHASSIS_STATUS_OK,
              "create f16");
        float hv[4] = {1.0f / 3.0f, 1000.1f, -2.5f, 0.0f};
        uint64_t hid = 0;
        CHECK(chassis_add(h, hv, 4, &hid) == CHASSIS_STATUS_OK, "add f16");
        float big[4] = {1.0f, 70000.0f, 0.0f, 0.0f};
        CHECK(chassis_add(h, big, 4, NULL) == CHASSIS_STATUS_INVALID_VECTOR, "f16 range");
        float back[4];
        CHECK(chassis_get(h, hid, back, 4) == CHASSIS_STATUS_OK && back[0] == 0.333251953125f &&
                  back[1] == 1000.0f && back[2] == -2.5f,
              "f16 values rounded: %f %f", back[0], back[1]);
        uint64_t hids[1];
        float hd[1];
        size_t hf = 0;
        CHECK(chassis_search(h, back, 4, 1, 16, hids, hd, &hf) == CHASSIS_STATUS_OK && hf == 1 && hd[0] == 0.0f,
              "f16 finds itself at distance 0");
        chassis_index_info hi;
        CHECK(chassis_info(h, &hi) == CHASSIS_STATUS_OK && hi.format == CHASSIS_FORMAT_F16 && hi.read_version == 5,
              "f16 info");
        chassis_close(h);
    }

    if (failures) {
        fprintf(stderr, "%d failure(s)\n", failures);
        return 1;
    }
    printf("C API: all checks passed\n");
    return 0;
}
