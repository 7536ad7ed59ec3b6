// Package outbound decides which hosts the server may connect to on a
// logged-in user's behalf: scrape targets and SLO alert webhooks
// (TOKENPATH_OUTBOUND_ALLOW). A Policy checks a URL when it is saved, for
// a clear form error, and every connection when it is dialled, on the
// address actually connected to, so a name that resolves elsewhere later
// (DNS rebinding) or a redirect cannot reach a host the list leaves out.
package outbound

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"path"
	"strings"
	"syscall"
	"time"
)

// ErrNotAllowed is wrapped by every refusal of a Policy.
var ErrNotAllowed = errors.New("not on the outbound allow-list (TOKENPATH_OUTBOUND_ALLOW)")

// Public is the entry that allows every globally routable address.
const Public = "public"

// Policy is a parsed allow-list. A nil *Policy allows every host.
type Policy struct {
	names  []string // lower-case host name globs
	nets   []netip.Prefix
	public bool
	// Resolver looks names up when a URL is saved and when it is dialled;
	// nil is net.DefaultResolver.
	Resolver *net.Resolver
}

// Parse reads a comma-separated list of host name globs ("*" matches any
// run of characters, dots included: *.svc.cluster.local), IP addresses,
// CIDR prefixes and the word public. An empty list is nil: every host.
func Parse(list string) (*Policy, error) {
	p := &Policy{}
	for _, e := range strings.Split(list, ",") {
		e = strings.ToLower(strings.TrimSpace(e))
		switch {
		case e == "":
			continue
		case e == Public:
			p.public = true
		case strings.Contains(e, "/"):
			pre, err := netip.ParsePrefix(e)
			if err != nil {
				return nil, fmt.Errorf("%q is not a CIDR prefix such as 10.0.0.0/8", e)
			}
			p.nets = append(p.nets, pre.Masked())
		default:
			if a, err := netip.ParseAddr(e); err == nil {
				a = a.Unmap()
				p.nets = append(p.nets, netip.PrefixFrom(a, a.BitLen()))
				continue
			}
			e = strings.TrimSuffix(e, ".")
			if _, err := path.Match(e, ""); err != nil || strings.ContainsAny(e, ":/@ ") {
				return nil, fmt.Errorf("%q is not a host name pattern such as *.svc.cluster.local", e)
			}
			p.names = append(p.names, e)
		}
	}
	if len(p.names) == 0 && len(p.nets) == 0 && !p.public {
		return nil, nil
	}
	return p, nil
}

// allowsName reports whether a host name matches one of the globs; the
// operator who lists a name trusts what it resolves to.
func (p *Policy) allowsName(host string) bool {
	host = strings.TrimSuffix(strings.ToLower(host), ".")
	for _, g := range p.names {
		if ok, _ := path.Match(g, host); ok {
			return true
		}
	}
	return false
}

// allowsAddr reports whether an address is in a listed prefix, or public
// when the list says public.
func (p *Policy) allowsAddr(a netip.Addr) bool {
	a = a.Unmap().WithZone("") // prefixes hold no zones
	for _, n := range p.nets {
		if n.Contains(a) {
			return true
		}
	}
	return p.public && IsPublic(a)
}

// nonPublic are global-unicast ranges that still do not lead to the open
// internet: shared (CGNAT), documentation, benchmarking, reserved, and
// the IPv6 forms that embed an IPv4 address (NAT64, 6to4).
var nonPublic = func() []netip.Prefix {
	var out []netip.Prefix
	for _, s := range []string{"0.0.0.0/8", "100.64.0.0/10", "192.0.0.0/24", "192.0.2.0/24", "198.18.0.0/15",
		"198.51.100.0/24", "203.0.113.0/24", "240.0.0.0/4", "64:ff9b::/96", "64:ff9b:1::/48", "2001:db8::/32", "2002::/16"} {
		out = append(out, netip.MustParsePrefix(s))
	}
	return out
}()

// IsPublic reports whether a is a globally routable unicast address: not
// loopback, private (RFC 1918, fc00::/7), link-local, CGNAT, multicast or
// reserved.
func IsPublic(a netip.Addr) bool {
	a = a.Unmap().WithZone("")
	if !a.IsGlobalUnicast() || a.IsPrivate() {
		return false
	}
	for _, n := range nonPublic {
		if n.Contains(a) {
			return false
		}
	}
	return true
}

func (p *Policy) resolver() *net.Resolver {
	if p.Resolver != nil {
		return p.Resolver
	}
	return net.DefaultResolver
}

// CheckURL tells whether a URL's host may be reached, for the form that
// saves it: a listed name, or a name whose every address is allowed. The
// dial checks again (DialContext): this answer is for the user, that one
// is the rule.
func (p *Policy) CheckURL(ctx context.Context, rawURL string) error {
	if p == nil {
		return nil
	}
	u, err := url.Parse(rawURL)
	if err != nil || u.Hostname() == "" {
		return errors.New("not a valid URL")
	}
	return p.CheckHost(ctx, u.Hostname())
}

// CheckHost is CheckURL for a bare host name or address.
func (p *Policy) CheckHost(ctx context.Context, host string) error {
	if p == nil {
		return nil
	}
	if a, err := netip.ParseAddr(strings.Trim(host, "[]")); err == nil {
		if p.allowsAddr(a) {
			return nil
		}
		return fmt.Errorf("host %s is %w", host, ErrNotAllowed)
	}
	if p.allowsName(host) {
		return nil
	}
	if len(p.nets) == 0 && !p.public {
		return fmt.Errorf("host %s is %w", host, ErrNotAllowed)
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	addrs, err := p.resolver().LookupNetIP(ctx, "ip", host)
	if err != nil || len(addrs) == 0 {
		return fmt.Errorf("host %s does not resolve to an address to check, and its name is %w", host, ErrNotAllowed)
	}
	for _, a := range addrs {
		if !p.allowsAddr(a) {
			// The addresses are not named: the form must not map the
			// internal network for whoever types names into it.
			return fmt.Errorf("host %s resolves to an address that is %w", host, ErrNotAllowed)
		}
	}
	return nil
}

// DialContext connects like net.Dialer, only to allowed hosts: a listed
// name as it resolves, anything else only to allowed addresses, checked
// on the address being connected to (the socket's Control hook), after
// every lookup.
func (p *Policy) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	d := &net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}
	if p == nil {
		return d.DialContext(ctx, network, addr)
	}
	d.Resolver = p.Resolver
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	if _, err := netip.ParseAddr(host); err != nil && p.allowsName(host) {
		return d.DialContext(ctx, network, addr)
	}
	d.Control = func(_, address string, _ syscall.RawConn) error {
		ap, err := netip.ParseAddrPort(address)
		if err != nil {
			return fmt.Errorf("host %s: %w", host, ErrNotAllowed)
		}
		if !p.allowsAddr(ap.Addr()) {
			return fmt.Errorf("host %s is %w", host, ErrNotAllowed)
		}
		return nil
	}
	return d.DialContext(ctx, network, addr)
}

// Transport is http.DefaultTransport's settings with DialContext. With a
// list it ignores HTTP(S)_PROXY: through a proxy the dial would check the
// proxy, not the host the request goes to.
func (p *Policy) Transport() *http.Transport {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.DialContext = p.DialContext
	if p != nil {
		t.Proxy = nil
	}
	return t
}

// Client is an HTTP client over Transport; timeout 0 means none (the
// request's context bounds it).
func (p *Policy) Client(timeout time.Duration) *http.Client {
	return &http.Client{Transport: p.Transport(), Timeout: timeout}
}
