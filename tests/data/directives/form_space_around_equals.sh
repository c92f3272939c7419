#!/bin/bash
#RSA_DATA_IN = /gpfs/alice/in
#RSA_DATA_OUT= /gpfs/alice/out
