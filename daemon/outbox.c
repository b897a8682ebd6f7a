/* The outbox: every message the daemon sends (replies, errors, goodbyes)
 * is encoded here, once, and goes to the transport its caller names.
 *
 * DESIGN
 * A reply's head [REPLY, id, code] is written in place (common/wire.h) in
 * front of its packed body; `via` (the transport its request came by,
 * opd_req_t.via) picks the completion ring (daemon/ringsvc.c) or the
 * socket (daemon/sock.c). A reply that does not fit a ring slot, a reply
 * that carries an fd, and every goodbye go to the socket. Errors are
 * {"message": text}; a goodbye also marks the session closing, and the
 * session closes it once the goodbye is out (daemon/session.c, pump).
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "common/clock.h" /* opd__now_ns */
#include "common/wire.h"
#include "daemon/log.h"
#include "daemon/outbox.h"
#include "daemon/ringsvc.h"
#include "daemon/sock.h"

/* Frames [type, id, code, body] where body is packed bytes or {}. */
static void send_msg(opd_session_t *s, int via, int type, uint64_t id,
                     int code, const char *body, size_t body_len) {
  /* the fixed head, written in place: 1 + 3 * 9 bytes at most */
  unsigned char hdr[OPD_FRAME_HEADER + 1 + 3 * OPD_MP_PUT_MAX];
  unsigned char *p = hdr + OPD_FRAME_HEADER;
  *p++ = 0x94;
  p = opd__mp_put_uint(p, (uint32_t)type);
  p = opd__mp_put_uint(p, id);
  p = opd__mp_put_int(p, code);
  size_t head = (size_t)(p - hdr) - OPD_FRAME_HEADER;
  static const char empty_map = (char)0x80;
  if (body == NULL) body = &empty_map, body_len = 1;
  if (via == OPD_VIA_RING && s->ring && s->fd >= 0 &&
      opd__ring_reply(s, hdr + OPD_FRAME_HEADER, head, body, body_len))
    return;
  opd__frame_put_len(hdr, (uint32_t)(head + body_len));
  opd__sock_write(s, hdr, OPD_FRAME_HEADER + head, body, body_len);
}

void opd__out_reply(opd_session_t *s, int via, uint64_t id, const char *body,
                    size_t body_len) {
  send_msg(s, via, OPD_MSG_REPLY, id, 0, body, body_len);
}

int opd__reply_fd(const opd_req_t *r, const char *body, size_t body_len,
                  int fd) {
  int rc = opd__sock_queue_fd(r->s, fd); /* an fd travels on the socket */
  if (rc == 0) send_msg(r->s, OPD_VIA_SOCKET, OPD_MSG_REPLY, r->id, 0, body,
                        body_len);
  return rc;
}

/* {"message": msg}, packed into out (cap bytes); msg is cut to fit. */
static size_t pack_text(char *out, size_t cap, const char *msg) {
  size_t n = strlen(msg);
  if (n + 16 > cap) n = cap - 16;
  msgpack_sbuffer sb = {.size = 0, .data = out, .alloc = cap};
  msgpack_packer pk;
  msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
  msgpack_pack_map(&pk, 1);
  msgpack_pack_str_with_body(&pk, "message", 7);
  msgpack_pack_str_with_body(&pk, msg, n);
  return sb.size;
}

void opd__out_error(opd_session_t *s, int via, uint64_t id, int code,
                    const char *fmt, ...) {
  char msg[512], body[600];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  size_t n = pack_text(body, sizeof body, msg);
  s->srv->errors++;
  if (opd__log_level >= OPD_LOG_DEBUG) {
    char esc[600];
    LOG_DEBUG("session %llu: request %llu: %s (%s)", (unsigned long long)s->id,
              (unsigned long long)id, opd__errname(code),
              opd__log_escape(msg, esc, sizeof esc));
  }
  send_msg(s, via, OPD_MSG_REPLY, id, code, body, n);
}

void opd__out_goodbye(opd_session_t *s, int code, const char *fmt, ...) {
  char msg[512], body[600], esc[600];
  va_list ap;
  if (s->goodbye == 2) return; /* one goodbye per session */
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  size_t n = pack_text(body, sizeof body, msg);
  send_msg(s, OPD_VIA_SOCKET, OPD_MSG_GOODBYE, 0, code, body, n);
  if (!s->quiet)
    LOG_INFO("session %llu: closing: %s", (unsigned long long)s->id,
             opd__log_escape(msg, esc, sizeof esc));
  s->closing = 1;
  s->goodbye = 2; /* sent: close once the running job and wbuf are done */
  s->t_goodbye = opd__now_ns();
}
