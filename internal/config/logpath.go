package config

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// checkLogPath reports why a log file at path could not be opened for
// appending as logfile.Open opens it (creating it if needed): "stdout" and
// "stderr" always can; an existing file must be writable and not a
// directory; a new one needs an existing, writable directory. Checking
// creates nothing, so validating a config on the host that will run it
// leaves no trace.
func checkLogPath(path string) error {
	switch path {
	case "stdout", "stderr":
		return nil
	}
	fi, err := os.Stat(path)
	switch {
	case err == nil && fi.IsDir():
		return errors.New("it is a directory")
	case err == nil:
		if err := writable(path); err != nil {
			return fmt.Errorf("the file is not writable: %w", err)
		}
		return nil
	case !errors.Is(err, fs.ErrNotExist):
		return err
	}
	dir := filepath.Dir(path)
	di, err := os.Stat(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("directory %s does not exist", dir)
	case err != nil:
		return err
	case !di.IsDir():
		return fmt.Errorf("%s is not a directory", dir)
	}
	if err := writable(dir); err != nil {
		return fmt.Errorf("directory %s is not writable: %w", dir, err)
	}
	return nil
}
