package postgres

import (
	"testing"

	"github.com/backstophq/backstop/store"
	"github.com/backstophq/backstop/store/storetest"
)

func TestFleetConformance(t *testing.T) {
	storetest.RunFleet(t, storetest.Harness{
		Open: func(t *testing.T, cfg store.Config) (store.Store, error) {
			s, err := openTest(t, cfg)
			if err != nil {
				return nil, err
			}
			return s, nil
		},
		Poison: poison,
	})
}
