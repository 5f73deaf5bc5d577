package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/presenced/presenced/protocol"
)

// Join joins channel ch and returns once its snapshot came, or with the
// server's refusal (a *ServerError) or a snapshot that contradicts itself
// (ErrProtocol), after which the Client is not in ch. Otherwise it stays
// in ch across reconnects until Leave. If ctx ends first, the Client still joins ch
// when it can. A join leaves the connection's activity as it was.
func (c *Client) Join(ctx context.Context, ch string) error {
	if !protocol.ValidChannel(ch) {
		return fmt.Errorf("client: join %q: %w", protocol.Truncate(ch), protocol.ErrInvalidChannel)
	}
	c.mu.Lock()
	c.joined[ch] = struct{}{}
	c.mu.Unlock()
	err := c.retry(ctx, func(cn *conn) error {
		c.mu.Lock()
		st := c.channels[ch]
		c.mu.Unlock()
		if st != nil && st.gen == cn.gen {
			return nil // joined on this connection already
		}
		_, err := cn.call(ctx, protocol.Join{Channel: ch}, &request{kind: "joined", channel: ch})
		return err
	})
	if isServerError(err) || errors.Is(err, ErrProtocol) {
		c.mu.Lock()
		delete(c.joined, ch)
		c.mu.Unlock()
	}
	if err != nil {
		return fmt.Errorf("client: join %s: %w", ch, err)
	}
	return nil
}

// Leave leaves channel ch and returns once the server confirmed it; the
// channel's state is gone then.
func (c *Client) Leave(ctx context.Context, ch string) error {
	if !protocol.ValidChannel(ch) {
		return fmt.Errorf("client: leave %q: %w", protocol.Truncate(ch), protocol.ErrInvalidChannel)
	}
	c.mu.Lock()
	delete(c.joined, ch)
	delete(c.loaded, ch)
	c.mu.Unlock()
	// Said even for a channel with no state yet: a join of it may be on its
	// way (one whose ctx ended, or one made meanwhile). The server answers
	// left either way.
	err := c.retry(ctx, func(cn *conn) error {
		_, err := cn.call(ctx, protocol.Leave{Channel: ch}, &request{kind: "left", channel: ch})
		return err
	})
	if err != nil {
		return fmt.Errorf("client: leave %s: %w", ch, err)
	}
	return nil
}

// Watch replaces the watch list with uids and returns once the server
// answered with who of them is online. User then reports their state; the
// server names in an error event the IDs it does not let this user watch.
func (c *Client) Watch(ctx context.Context, uids []string) error {
	if len(uids) > protocol.MaxWatch {
		return fmt.Errorf("client: watch: %d user IDs, at most %d", len(uids), protocol.MaxWatch)
	}
	for _, uid := range uids {
		if !protocol.ValidUID(uid) {
			return fmt.Errorf("client: watch %q: %w", protocol.Truncate(uid), protocol.ErrInvalidUID)
		}
	}
	uids = append([]string{}, uids...)
	c.mu.Lock()
	c.watch = uids
	c.mu.Unlock()
	err := c.retry(ctx, func(cn *conn) error {
		_, err := cn.call(ctx, protocol.Watch{UIDs: uids}, &request{kind: "watching", uids: uids})
		return err
	})
	if err != nil {
		return fmt.Errorf("client: watch: %w", err)
	}
	return nil
}

// chatFrame is a chat with a ref: an error frame about it echoes the ref,
// which tells it from the answer to a call.
type chatFrame struct {
	Type    string `json:"type"`
	Channel string `json:"channel"`
	Text    string `json:"text"`
	Ref     int64  `json:"ref"`
}

// Chat sends text to channel ch, a channel the Client joined, and returns
// once it is written. The server answers nothing: every member, this
// Client included, gets a *protocol.Chat event; a chat the server could
// not deliver comes back as a *protocol.Error event whose Ref is set.
// Chatting makes the connection active.
func (c *Client) Chat(ctx context.Context, ch, text string) error {
	if text == "" {
		return errors.New("client: chat: empty text")
	}
	if err := c.mustHaveJoined(ch); err != nil {
		return fmt.Errorf("client: chat: %w", err)
	}
	data, err := json.Marshal(chatFrame{Type: "chat", Channel: ch, Text: text, Ref: c.chatRef.Add(1)})
	if err != nil {
		return fmt.Errorf("client: chat: %w", err)
	}
	if err := c.retry(ctx, func(cn *conn) error { return cn.sendRaw(ctx, data) }); err != nil {
		return fmt.Errorf("client: chat in %s: %w", ch, err)
	}
	return nil
}

// Typing says the user is typing in channel ch, a channel the Client
// joined; say it again every few seconds while the user goes on typing.
// It makes the connection active.
func (c *Client) Typing(ctx context.Context, ch string) error {
	if err := c.mustHaveJoined(ch); err != nil {
		return fmt.Errorf("client: typing: %w", err)
	}
	if err := c.retry(ctx, func(cn *conn) error { return cn.send(ctx, protocol.Typing{Channel: ch}) }); err != nil {
		return fmt.Errorf("client: typing in %s: %w", ch, err)
	}
	return nil
}

// mustHaveJoined checks that ch is a channel the Client is in, and counts
// the frame about to go there as activity.
func (c *Client) mustHaveJoined(ch string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.joined[ch]; !ok {
		return fmt.Errorf("channel %q not joined", protocol.Truncate(ch))
	}
	c.away = false
	return nil
}

// SetActivity says whether the user is away (true) or active, and keeps
// saying it after each reconnect. The server answers nothing; a Chat or
// Typing makes the connection active again.
func (c *Client) SetActivity(ctx context.Context, away bool) error {
	state := "active"
	if away {
		state = "away"
	}
	c.mu.Lock()
	c.away = away
	c.mu.Unlock()
	if err := c.retry(ctx, func(cn *conn) error { return cn.send(ctx, protocol.Activity{State: state}) }); err != nil {
		return fmt.Errorf("client: set activity %s: %w", state, err)
	}
	return nil
}
