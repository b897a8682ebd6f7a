/* The CUDA backend's shared state that is data, not calls (state.h): the
 * device each thread last switched to. Its own file so that the backend's
 * other files all depend on it and it on none of them. */
#include "daemon/backend/cuda/state.h"

_Thread_local int opd__cu_cur_device = -1;
