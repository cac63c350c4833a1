//go:build !linux

package pq

import "errors"

func setUserTimeout(fd, ms int) error { return nil } // TCP_USER_TIMEOUT is Linux only

func getUserTimeout(fd int) (int, error) { return 0, errors.ErrUnsupported }
