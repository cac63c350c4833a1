package pq

import "syscall"

// tcpUserTimeout is TCP_USER_TIMEOUT from linux/tcp.h.
const tcpUserTimeout = 0x12

func setUserTimeout(fd, ms int) error {
	return syscall.SetsockoptInt(fd, syscall.IPPROTO_TCP, tcpUserTimeout, ms)
}

func getUserTimeout(fd int) (int, error) {
	return syscall.GetsockoptInt(fd, syscall.IPPROTO_TCP, tcpUserTimeout)
}
