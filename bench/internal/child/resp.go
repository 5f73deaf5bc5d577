package child

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"time"
)

// RedisError is an error reply of Redis.
type RedisError string

func (e RedisError) Error() string { return "redis: " + string(e) }

// Do sends one command to the Redis server at addr on a connection of its
// own and returns the reply: a string (simple or bulk), an int64, nil (a
// null), a []any, or an error (a RedisError for an error reply). A harness
// drives Redis with it without a client library.
func Do(ctx context.Context, addr string, args ...string) (any, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("redis %s: %w", addr, err)
	}
	defer c.Close()
	deadline, ok := ctx.Deadline()
	if !ok {
		deadline = time.Now().Add(30 * time.Second)
	}
	_ = c.SetDeadline(deadline)
	buf := fmt.Appendf(nil, "*%d\r\n", len(args))
	for _, a := range args {
		buf = fmt.Appendf(buf, "$%d\r\n%s\r\n", len(a), a)
	}
	if _, err := c.Write(buf); err != nil {
		return nil, fmt.Errorf("redis %s: %v: %w", addr, args, err)
	}
	v, err := readReply(bufio.NewReader(c))
	if err != nil {
		return nil, fmt.Errorf("redis %s: %v: %w", addr, args, err)
	}
	if e, ok := v.(RedisError); ok {
		return nil, fmt.Errorf("redis %s: %v: %w", addr, args, e)
	}
	return v, nil
}

// readReply reads one RESP2 reply.
func readReply(r *bufio.Reader) (any, error) {
	line, err := r.ReadString('\n')
	if err != nil {
		return nil, err
	}
	if len(line) < 3 || line[len(line)-2] != '\r' {
		return nil, fmt.Errorf("malformed reply line %q", line)
	}
	kind, body := line[0], line[1:len(line)-2]
	switch kind {
	case '+':
		return body, nil
	case '-':
		return RedisError(body), nil
	case ':':
		return strconv.ParseInt(body, 10, 64)
	case '$':
		n, err := strconv.Atoi(body)
		if err != nil || n < 0 {
			return nil, err // $-1 is a null
		}
		b := make([]byte, n+2)
		if _, err := io.ReadFull(r, b); err != nil {
			return nil, err
		}
		return string(b[:n]), nil
	case '*':
		n, err := strconv.Atoi(body)
		if err != nil || n < 0 {
			return nil, err
		}
		out := make([]any, n)
		for i := range out {
			if out[i], err = readReply(r); err != nil {
				return nil, err
			}
		}
		return out, nil
	}
	return nil, errors.New("unknown reply type " + strconv.Quote(string(kind)))
}
