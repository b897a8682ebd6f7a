/* The batch checks of async_gpu.cu (included there, after its helpers:
 * CHECK's counts are that file's): opd_batch_begin / _end from a CUDA
 * client. */

/* a batch (opd_batch_begin / _end): the runs ordered among
 * themselves on the daemon's stream, the first after the client's work,
 * the client's work after the end after all of them */
static void check_batch(const char *sock, opd_client_t *c, cudaStream_t s,
                        float *y, float *z, long long ms20) {
  int rc;
  double t0;
  enum { E = 4096 };
  const int CH = 200; /* past BATCH_RUNS (64): it joins by itself */
  opd_tensor_t a = vec(E), w = vec(E), b = vec(E);
  float *hw = (float *)malloc(E * sizeof(float)), *wd = NULL, *bd = NULL;
  cudaMalloc((void **)&wd, E * sizeof(float));
  cudaMalloc((void **)&bd, E * sizeof(float));
  for (int i = 0; i < E; i++) hw[i] = 1.0001f;
  cudaMemcpy(wd, hw, E * sizeof(float), cudaMemcpyHostToDevice);
  rc = opd_tensor_cuda(c, "cuda:0", y, &a);
  rc |= opd_tensor_cuda(c, "cuda:0", wd, &w);
  rc |= opd_tensor_cuda(c, "cuda:0", bd, &b);
  opd_tensor_t aw[2] = {a, w};
  slow_fill<<<16, 256, 0, s>>>(y, E, 5000.0f, ms20 / 4); /* the first waits */
  rc |= opd_batch_begin(c, s);
  int r_twice = opd_batch_begin(c, s);
  CHECK(r_twice == OPD_ESTATE && strstr(opd_last_error(), "already open"),
        "a second opd_batch_begin: %s (%s)", opd_errname(r_twice),
        opd_last_error());
  t0 = now_ms();
  for (int i = 0; i < CH && rc == 0; i++)
    rc = i % 2 ? opd_enqueue_stream(c, "cuda:0", s, "mul", aw, 2, &a, 1, NULL, 0)
               : opd_enqueue_stream(c, "cuda:0", s, "relu", &a, 1, &a, 1, NULL, 0);
  double t_enq = now_ms() - t0;
  rc |= opd_batch_end(c);
  slow_fill<<<16, 256, 0, s>>>(y, E, -1e6f, 0); /* after every run */
  twice<<<16, 256, 0, s>>>(y, z, E);
  cudaMemcpyAsync(hw, z, E * sizeof(float), cudaMemcpyDeviceToHost, s);
  cudaStreamSynchronize(s);
  double t_all = now_ms() - t0;
  int wrong = 0;
  for (int i = 0; i < E; i++) wrong += hw[i] != -2e6f - 2.0f * (float)i;
  /* the batch's result itself: again, read on the stream right after
   * (opd_synchronize half way and after the last: the answers read, the
   * join still due) */
  slow_fill<<<16, 256, 0, s>>>(y, E, 5000.0f, ms20 / 4);
  rc |= opd_batch_begin(c, s);
  for (int i = 0; i < CH && rc == 0; i++) {
    rc = i % 2 ? opd_enqueue_stream(c, "cuda:0", s, "mul", aw, 2, &a, 1, NULL, 0)
               : opd_enqueue_stream(c, "cuda:0", s, "relu", &a, 1, &a, 1, NULL, 0);
    if (rc == 0 && (i == CH / 2 || i == CH - 1)) rc = opd_synchronize(c);
  }
  rc |= opd_batch_end(c);
  cudaMemcpyAsync(hw, y, E * sizeof(float), cudaMemcpyDeviceToHost, s);
  cudaStreamSynchronize(s);
  for (int i = 0; i < E; i++) {
    float want = 5000.0f - (float)i;
    for (int r = 0; r < CH / 2; r++) want *= 1.0001f;
    wrong += hw[i] != want;
  }
  rc |= opd_synchronize(c);
  CHECK(rc == 0 && wrong == 0, "batch: %d dependent runs twice, the first "
        "after a slow kernel of the client, the input overwritten and the "
        "output read right after opd_batch_end: %d wrong (%s)", CH, wrong,
        rc ? opd_last_error() : "ok");
  printf("note: a batch of %d runs: %.2f us per call, %.2f us per run to "
         "the end\n", CH, t_enq * 1e3 / CH, t_all * 1e3 / CH);
  int r_end = opd_batch_end(c);
  CHECK(r_end == OPD_ESTATE && strstr(opd_last_error(), "no batch is open"),
        "opd_batch_end without a batch: %s (%s)", opd_errname(r_end),
        opd_last_error());
  /* a connection closed inside a batch: joined at opd_close */
  opd_client_t *cb = NULL;
  rc = opd_connect(sock, &cb);
  opd_tensor_t a2 = vec(E);
  if (rc == 0) rc = opd_tensor_cuda(cb, "cuda:0", bd, &a2);
  slow_fill<<<16, 256, 0, s>>>(bd, E, 77.0f, ms20 / 4);
  if (rc == 0) rc = opd_batch_begin(cb, s);
  for (int i = 0; i < 10 && rc == 0; i++)
    rc = opd_enqueue_stream(cb, "cuda:0", s, "relu", &a2, 1, &a2, 1, NULL, 0);
  opd_close(cb);
  twice<<<16, 256, 0, s>>>(bd, z, E);
  cudaMemcpyAsync(hw, z, E * sizeof(float), cudaMemcpyDeviceToHost, s);
  cudaStreamSynchronize(s);
  wrong = 0;
  for (int i = 0; i < E; i++) {
    float v = 77.0f - (float)i;
    wrong += hw[i] != 2.0f * (v > 0 ? v : 0.0f);
  }
  CHECK(rc == 0 && wrong == 0, "batch: a connection closed inside it "
        "joins the stream first: %d wrong (%s)", wrong,
        rc ? opd_last_error() : "ok");
  cudaFree(wd);
  cudaFree(bd);
  free(hw);
}
