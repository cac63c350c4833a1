package oteltest
