package reliability_test

import (
	"net"
	"sync"
	"testing"
	"time"
)

// tcpProxy stands between the server and PostgreSQL so a test can take the
// database away and bring it back on the same address, without touching
// the machine's PostgreSQL that other packages' tests share. "down" refuses
// new connections and cuts the open ones (what a stopped or restarted
// server looks like to pgx); "blackhole" accepts connections and lets open
// ones stay up but forwards nothing (a network partition, where only
// timeouts help).
type tcpProxy struct {
	addr, target string

	mu        sync.Mutex
	ln        net.Listener
	conns     map[net.Conn]struct{}
	blackhole bool
}

func newTCPProxy(t *testing.T, target string) *tcpProxy {
	t.Helper()
	p := &tcpProxy{target: target, conns: map[net.Conn]struct{}{}}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p.addr = ln.Addr().String()
	p.serve(ln)
	t.Cleanup(p.down)
	return p
}

func (p *tcpProxy) serve(ln net.Listener) {
	p.mu.Lock()
	p.ln = ln
	p.mu.Unlock()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go p.handle(c)
		}
	}()
}

func (p *tcpProxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ln == nil {
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *tcpProxy) handle(client net.Conn) {
	if !p.track(client) {
		client.Close()
		return
	}
	p.mu.Lock()
	hole := p.blackhole
	p.mu.Unlock()
	if hole {
		return // held open, never answered; down() closes it
	}
	upstream, err := net.DialTimeout("tcp", p.target, 5*time.Second)
	if err != nil {
		client.Close()
		return
	}
	if !p.track(upstream) {
		client.Close()
		upstream.Close()
		return
	}
	pipe := func(dst, src net.Conn) {
		buf := make([]byte, 32<<10)
		for {
			n, err := src.Read(buf)
			if n > 0 {
				p.mu.Lock()
				hole := p.blackhole
				p.mu.Unlock()
				if hole {
					continue // swallow: the peer waits forever
				}
				if _, werr := dst.Write(buf[:n]); werr != nil {
					break
				}
			}
			if err != nil {
				break
			}
		}
		dst.Close()
		src.Close()
	}
	go pipe(upstream, client)
	go pipe(client, upstream)
}

// down refuses new connections and cuts every open one.
func (p *tcpProxy) down() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ln != nil {
		p.ln.Close()
		p.ln = nil
	}
	for c := range p.conns {
		c.Close()
	}
	clear(p.conns)
}

// up listens on the same address again and forwards.
func (p *tcpProxy) up(t *testing.T) {
	t.Helper()
	p.mu.Lock()
	p.blackhole = false
	p.mu.Unlock()
	var ln net.Listener
	var err error
	for range 50 { // the port may linger for a moment after close
		if ln, err = net.Listen("tcp", p.addr); err == nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("proxy: listen %s again: %v", p.addr, err)
	}
	p.serve(ln)
}

// setBlackhole stops forwarding bytes on every connection, open or new.
func (p *tcpProxy) setBlackhole(on bool) {
	p.mu.Lock()
	p.blackhole = on
	p.mu.Unlock()
}
